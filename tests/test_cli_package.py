"""The command line as one package (issue 32): ``serve --help`` in groups, typos answered with
the nearest option, Ctrl-C at any moment of a start-up, the ``--store`` switch, and no store
driver imported by the default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scoped_a2a.cli.help import nearest
from scoped_a2a.cli.main import main
from scoped_a2a.cli.parser import build_parser

from .test_cli import StderrLog, start, stopped_cleanly

ROOT = Path(__file__).resolve().parent.parent

SERVE_GROUPS = [
    "listening and TLS", "the agent and its card", "transports", "runs and detach rules",
    "stores", "limits and bodies", "push notifications", "authentication", "console",
    "observability",
]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep
            + os.environ.get("PYTHONPATH", "")}


def test_serve_help_shows_its_options_in_groups_in_order(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].endswith(" serve [options]"), text.splitlines()[0]
    where = [text.find(f"\n{title}:\n") for title in SERVE_GROUPS]
    assert -1 not in where, [t for t, w in zip(SERVE_GROUPS, where, strict=True) if w < 0]
    assert where == sorted(where), "groups out of order"
    # Every option of serve is in a group of its own concern, none left in the flat list.
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["serve"]
    flat = [a for g in sub._action_groups if g.title == "options" for a in g._group_actions]
    assert [a.dest for a in flat] == ["help"]
    grouped = {a.dest for g in sub._action_groups if g.title in SERVE_GROUPS
               for a in g._group_actions}
    assert {"port", "agent", "grpc", "grace", "store", "max_body_bytes", "no_push",
            "api_keys", "console", "metrics", "log_level"} <= grouped
    for g in sub._action_groups:  # each group has a one-line summary
        if g.title in SERVE_GROUPS:
            assert g.description and "\n" not in g.description, g.title


@pytest.mark.parametrize(("argv", "guess", "help_of"), [
    (["serve", "--prot", "8002"], "did you mean --port?", "serve --help"),
    (["serve", "--grcp"], "did you mean --grpc?", "serve --help"),
    (["send", "http://x/", "hi", "--stram"], "did you mean --stream?", "send --help"),
    (["sevre"], "did you mean serve?", "serve --help"),
    (["serve", "--backend", "trioo"], "did you mean trio?", "serve --help"),
])
def test_a_typo_names_the_nearest_option_and_the_commands_help(
        argv: list[str], guess: str, help_of: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert guess in err, err
    assert err.rstrip().endswith(f"{help_of})"), err


def test_a_word_far_from_every_option_gets_no_guess(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--zzzzqqq"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "serve --help" in err, err
    assert nearest("--prot", ["--port", "--host"]) == "--port"


def test_the_store_switch_maps_each_scheme_to_its_module() -> None:
    from scoped_a2a.cli import store_memory, store_postgres, store_redis, store_sqlite
    from scoped_a2a.cli.stores import store_module

    assert store_module("memory") is store_memory
    assert store_module("sqlite:tasks.db") is store_sqlite
    for url in ("redis://localhost/0", "rediss://h/1", "unix:///tmp/r.sock"):
        assert store_module(url) is store_redis
    for url in ("postgresql://app@db/agents", "postgres://h/d"):
        assert store_module(url) is store_postgres
    with pytest.raises(SystemExit, match="--store must be 'memory', sqlite:PATH, a redis"):
        store_module("mysql://x")
    with pytest.raises(SystemExit, match="needs a file path"):
        store_module("sqlite:").check("sqlite:")


# A store driver or an extra: what the default must not import (sqlite3 is stdlib, but only the
# SQLite store needs it).
DRIVERS = ("coredis", "redis", "sqlite3", "_sqlite3", "psycopg", "asyncpg", "google.protobuf",
           "opentelemetry", "prometheus_client", "jwt")

_NO_EXTRAS = textwrap.dedent("""
    import atexit, sys
    BLOCKED = {blocked!r}
    tried = []
    class NoExtras:
        def find_spec(self, name, path=None, target=None):
            if name in BLOCKED or name.split(".")[0] in BLOCKED:
                tried.append(name)
                raise ImportError(f"{{name}} is not installed (test)")
            return None
    sys.meta_path.insert(0, NoExtras())
    atexit.register(lambda: print("tried:", sorted(set(tried)), flush=True))
    {body}
""")


def test_import_scoped_a2a_imports_no_store_driver() -> None:
    body = ("import scoped_a2a\n"
            "from scoped_a2a import *\n"
            "assert A2AApp is scoped_a2a.A2AApp and callable(serve)\n"
            "import signal\n"  # a library import leaves the program's Ctrl-C alone
            "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
            "print('loaded:', sorted(m for m in sys.modules if m in BLOCKED), flush=True)")
    done = subprocess.run(
        [sys.executable, "-c", _NO_EXTRAS.format(blocked=DRIVERS, body=body)],
        env=_env(), capture_output=True, text=True, timeout=60,
        # As a user's shell starts it: a test worker whose SIGINT is ignored (an earlier test
        # in it) would pass that on, and Python then installs no handler of its own.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout and "tried: []" in done.stdout, done.stdout


def test_serve_with_no_extras_installed_imports_no_store_driver() -> None:
    body = ("from scoped_a2a.cli.main import main\n"
            "sys.argv = ['scoped-a2a', 'serve', '--port', '0']\n"
            "sys.exit(main())")
    proc = subprocess.Popen(
        [sys.executable, "-c", _NO_EXTRAS.format(blocked=DRIVERS, body=body)],
        env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = StderrLog(proc.stderr)
    import httpx

    url = log.wait_for(r"serving on (http://\S+)").group(1)
    answer = httpx.post(url, timeout=10, json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER",
                               "parts": [{"text": "hello"}]}}}).json()
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    stopped_cleanly(proc, log)  # type: ignore[arg-type]
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0
    assert "tried: []" in out, out


@pytest.mark.slow
@pytest.mark.one_python("3.13")  # a venv and a pip install: one Python is enough (suite time)
def test_a_fresh_venv_without_extras_imports_and_serves(tmp_path: Path) -> None:
    # What the meta-path blocker above cannot see: a module of the core that needs a package
    # only an extra (or the test venv) brings. The worktree is pip-installed with no extras into
    # a new venv (no site-packages of the test venv), and then imported and served from there.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    built = subprocess.run([python, "-m", "pip", "install", "-q", "--no-input", str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    if built.returncode != 0:  # no reachable package index: nothing to say about the package
        pytest.skip(f"pip could not install the core dependencies: {built.stderr[-500:]}")
    extras = ("coredis", "psycopg", "temporalio", "jwt", "opentelemetry", "prometheus_client",
              "pydantic_ai", "a2a", "google", "rfc8785")
    found = subprocess.run(
        [python, "-c", "import importlib.util as u, sys; "
         f"print([m for m in {extras!r} if u.find_spec(m)])"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr  # truly without extras
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    body = ("import scoped_a2a\n"
            "assert scoped_a2a.__file__.startswith(sys.prefix), scoped_a2a.__file__\n"
            "from scoped_a2a.cli.main import main\n"
            "sys.argv = ['scoped-a2a', 'serve', '--port', '0']\n"
            "sys.exit(main())")
    proc = subprocess.Popen([python, "-c", _NO_EXTRAS.format(blocked=DRIVERS, body=body)],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = StderrLog(proc.stderr)
    import httpx

    url = log.wait_for(r"serving on (http://\S+)", 60).group(1)
    answer = httpx.post(url, timeout=30, headers={"A2A-Version": "1.0"}, json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER",
                               "parts": [{"text": "hello"}]}}}).json()
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    stopped_cleanly(proc, log)  # type: ignore[arg-type]
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, log.text()[-2000:]
    assert "tried: []" in out, out  # no driver even attempted


# --- Ctrl-C at any moment of a start-up -------------------------------------------------------

DELAYS = [0.15, 0.3, 0.6, 1.0, 2.0]


@pytest.fixture(params=["idle", "loaded"])
def machine(request: pytest.FixtureRequest) -> Iterator[str]:
    """``loaded``: two processes spinning on the CPU (this machine has two cores) while the
    test runs, so the command's start-up is slow and a signal lands in a different place."""
    hogs = []
    if request.param == "loaded":
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield request.param
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _interrupt(argv: list[str], delay: float) -> tuple[int, str, float]:
    """Start the command, SIGINT it ``delay`` seconds after the package has been imported;
    (status, stderr, seconds it took to exit after the signal). A command still running 15 s
    after the signal fails the test.

    The delay counts from the package's import (Python's import-time report names it), not
    from the process's start: a Ctrl-C during the interpreter's own start-up (``site``,
    ``runpy``; over 0.15 s on a loaded machine) is CPython's traceback, before any code of the
    package runs, as for every Python program."""
    proc = subprocess.Popen([sys.executable, "-m", "scoped_a2a", *argv], cwd=ROOT,
                            env={**_env(), "PYTHONPROFILEIMPORTTIME": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = StderrLog(proc.stderr)
    try:
        log.wait_for(r"(?m)\|\s+scoped_a2a$", timeout=60)
    except AssertionError:
        proc.kill()
        raise
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{argv[0]} had not exited 15 s after SIGINT at {delay}s:\n"
                    f"{_without_import_times(log)[-3000:]}")
    return proc.returncode, _without_import_times(log), time.monotonic() - sent


def _without_import_times(log: StderrLog) -> str:
    """stderr once the process has ended, without the import-time report."""
    with log.changed:
        log.changed.wait_for(lambda: log.closed, timeout=10)
    return "".join(f"{line}\n" for line in log.text().splitlines()
                   if not line.startswith("import time:"))


def _ours(err: str) -> list[str]:
    """stderr without the log lines (``2026-... INFO name: ...``) a server writes anyway."""
    return [ln for ln in err.splitlines() if not ln[:4].isdigit()]


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
@pytest.mark.slow
@pytest.mark.parametrize("delay", DELAYS)
def test_sigint_during_serve_start_up_is_one_line_never_a_traceback(
        delay: float, machine: str) -> None:
    status, err, took = _interrupt(["serve", "--port", "0"], delay)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    # Before serve's own handling: 130 and "interrupted"; after it: a graceful shutdown, 0.
    assert status in (0, 130), err
    assert _ours(err) == (["interrupted"] if status == 130 else []), err
    assert took < 10, took


@pytest.fixture(scope="module")
def slow_agent_url() -> Iterator[str]:
    proc, url, log = start("--grace", "0")
    try:
        yield url
    finally:
        stopped_cleanly(proc, log)


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
@pytest.mark.slow
@pytest.mark.parametrize("delay", DELAYS)
def test_sigint_during_send_is_one_line_never_a_traceback(
        delay: float, machine: str, slow_agent_url: str) -> None:
    status, err, took = _interrupt(["send", slow_agent_url, "slow 30"], delay)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert status == 130, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted"), err
    assert took < 10, took


# What a Ctrl-C that lands in a callback whose exceptions Python ignores becomes (seen: the
# import machinery's weakref callback ``_get_module_lock.<locals>.cb``, during ``send``'s
# start-up on a loaded machine): "Exception ignored" with a traceback, and the command ran on.
_DROPPED_CTRL_C = textwrap.dedent("""
    import importlib, sys
    m = importlib.import_module("scoped_a2a.cli.main")
    p = importlib.import_module("scoped_a2a.cli.parser")
    build = p.build_parser
    class Dropped:
        def __del__(self):
            raise KeyboardInterrupt
    def build_parser():
        Dropped()  # freed at once: Python prints and drops its KeyboardInterrupt
        return build()
    p.build_parser = build_parser
    raise SystemExit(m.main(sys.argv[1:]))
""")


def test_a_ctrl_c_python_drops_before_send_installs_its_handling_still_ends_it(
        slow_agent_url: str) -> None:
    done = subprocess.run([sys.executable, "-c", _DROPPED_CTRL_C, "send", slow_agent_url,
                           "slow 30"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=_env())
    assert done.returncode == 130, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted"), done.stderr[-2000:]


def test_a_ctrl_c_python_drops_before_serve_installs_its_handling_shuts_it_down() -> None:
    done = subprocess.run([sys.executable, "-c", _DROPPED_CTRL_C, "serve", "--port", "0"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, \
        done.stderr[-2000:]
    assert "SIGINT (before its handler was installed): shutting down" in done.stderr, \
        done.stderr[-2000:]


def test_a_ctrl_c_python_drops_before_the_workers_start_starts_none() -> None:
    # serve --workers: the supervisor's own handlers come after the parse; a Ctrl-C dropped
    # before them is "interrupted" and 130, with no worker started.
    done = subprocess.run([sys.executable, "-c", _DROPPED_CTRL_C, "serve", "--port", "0",
                           "--workers", "2", "--store", "redis://127.0.0.1:9/0"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=_env())
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr == "interrupted\n", done.stderr[-2000:]


def test_a_ctrl_c_that_an_extension_turned_into_an_import_error_is_one_line() -> None:
    # Seen on Python 3.13: a Ctrl-C while msgspec's C module imports datetime
    # (PyCapsule_Import) surfaced as ImportError 'could not import module "datetime"' with a
    # traceback. Made deterministic: the command's import raises that error from a SIGINT.
    code = textwrap.dedent("""
        import importlib, os, signal, sys, time
        m = importlib.import_module("scoped_a2a.cli.main")
        p = importlib.import_module("scoped_a2a.cli.parser")
        def build_parser():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            except KeyboardInterrupt:
                raise ImportError('PyCapsule_Import could not import module "datetime"') from None
        p.build_parser = build_parser
        raise SystemExit(m.main(["serve", "--port", "0"]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=_env())
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr == "interrupted\n", done.stderr[-2000:]


def test_a_half_built_object_freed_after_a_ctrl_c_prints_nothing() -> None:
    # The cause of a rare traceback after "interrupted" (issue 32's SIGINT tests, at 0.3 s):
    # a Ctrl-C inside asyncio's event loop __init__ leaves a half-built loop whose __del__
    # fails when the exception holding it is freed. Made deterministic here: a command whose
    # object is interrupted in its __init__ and fails in its __del__.
    code = (
        "import importlib\n"
        "m = importlib.import_module('scoped_a2a.cli.main')\n"
        "class HalfBuilt:\n"
        "    def __init__(self):\n"
        "        raise KeyboardInterrupt\n"
        "    def __del__(self):\n"
        "        self.never_set.close()\n"
        "def command(argv):\n"
        "    HalfBuilt()\n"
        "m._main = command\n"
        "raise SystemExit(m.main([]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr == "interrupted\n", done.stderr[-2000:]
