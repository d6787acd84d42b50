"""An option given where it does nothing is refused in one line, exit status 2, before
anything listens (cli/option_scope.py): it used to be accepted and silently ignored, so
``serve --retain 60`` on the memory store, ``--redis-prefix`` on SQLite or
``--console-operator`` without ``--console`` looked configured and were not. Real
``python -m scoped_a2a`` processes; the options that do apply still start a server that
answers, on trio and asyncio."""

from __future__ import annotations

import pytest

from .test_cli import start, stop
from .test_cli_hardening import one_error_line
from .test_cli_newcomer import run

SQLITE = "sqlite:{tmp}/tasks.db"


@pytest.mark.parametrize(("args", "line"), [
    (["serve", "--retain", "60"],
     "--retain does nothing with the memory store (the default --store): it is for an SQLite "
     "or PostgreSQL store"),
    (["serve", "--lease", "3"],
     "--lease does nothing with the memory store (the default --store): it is for a Redis or "
     "PostgreSQL store"),
    (["serve", "--concurrency", "4"],
     "--concurrency does nothing with the memory store (the default --store): it is for a "
     "store with a durable queue: SQLite, Redis or PostgreSQL"),
    (["serve", "--store", SQLITE, "--redis-prefix", "app2"],
     "--redis-prefix does nothing with an SQLite store: it is for a Redis store"),
    (["serve", "--store", SQLITE, "--no-worker"],
     "--no-worker does nothing with an SQLite store: it is for a Redis or PostgreSQL store"),
    (["serve", "--store", SQLITE, "--postgres-pool", "3"],
     "--postgres-pool does nothing with an SQLite store: it is for a PostgreSQL store"),
    (["serve", "--console-operator", "ops"], "--console-operator needs --console"),
    (["serve", "--card-signing-kid", "k1"], "--card-signing-kid needs --card-signing-key"),
    (["serve", "--grpc-max-fields", "10"], "--grpc-max-fields needs --grpc"),
    (["serve", "--jwt-algorithms", "ES256"], "--jwt-algorithms needs --jwt-jwks"),
    (["serve", "--jwt-issuer", "https://issuer.example"], "--jwt-issuer needs --jwt-jwks"),
    (["serve", "--no-push", "--push-signing-secret", "s3"],
     "--push-signing-secret does nothing with --no-push"),
    (["worker", "--store", "redis://127.0.0.1:9/0", "--postgres-schema", "app2"],
     "--postgres-schema does nothing with a Redis store: it is for a PostgreSQL store"),
])
def test_an_option_that_would_do_nothing_is_one_line_and_exit_2(
        args: list[str], line: str, tmp_path: object) -> None:
    argv = [a.format(tmp=tmp_path) for a in args]
    port = ["--port", "0"] if argv[0] == "serve" else []
    assert one_error_line(run(*argv, *port)) == f"error: {line}"


def test_a_store_url_is_not_repeated_in_the_line() -> None:
    """The line names the kind of store, never its URL, which may hold a password."""
    done = run("serve", "--port", "0", "--store", "postgresql://app:hunter2@127.0.0.1:9/db",
               "--redis-prefix", "app2")
    said = one_error_line(done)
    assert said == ("error: --redis-prefix does nothing with a PostgreSQL store: it is for a "
                    "Redis store")
    assert "hunter2" not in done.stderr


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_options_that_apply_still_serve(backend: str, tmp_path: object,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's own options, an option given its default value (--redis-prefix scoped_a2a
    changes nothing), and a push secret from the environment beside --no-push (a default,
    not a choice made on this command line) all start a server that answers."""
    monkeypatch.setenv("SCOPED_A2A_PUSH_SIGNING_SECRET", "from-the-environment")
    proc, url, log = start("--backend", backend, "--store", SQLITE.format(tmp=tmp_path),
                           "--retain", "60", "--concurrency", "2", "--claim-idle", "5",
                           "--max-ended-bytes", "64MiB", "--redis-prefix", "scoped_a2a",
                           "--no-push")
    try:
        sent = run("send", url, "hi", "--backend", backend)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.endswith("completed: You said: hi\n"), sent.stdout
    finally:
        stop(proc, log)
