"""The command line's edges as a new user meets them (issue 21, items 8-11, 13, 16): real
``python -m scoped_a2a`` processes against real servers.

Every start-up error is one line on stderr and exit status 2; a store out of reach stops
``serve`` before it listens; ``send --timeout`` bounds the whole call and hangs up; failures are
said once and in words; a bad API-key file on SIGHUP is reported, not reported as reloaded.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import httpx
import pytest
import trustme
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from scoped_a2a import A2AApp, serve
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.tls import ClientCertificate

from .helpers import free_port, served
from .test_cli import StderrLog, start, stop
from .test_cli_newcomer import ENV, SRC, arun, arun_all, run
from .test_tls import served_tls

ROOT = Path(SRC).parent


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and "serving on" not in done.stderr
    return lines[0]


# --- item 8: every start-up error is one line and exit 2 ---------------------------------------


@pytest.mark.parametrize(("args", "says"), [
    (["--port", "99999"], "99999 is not a port"),
    (["--port", "http"], "'http' is not a port number"),
    (["--host", "no.such.host.invalid"], "cannot listen on no.such.host.invalid: the name "
                                         "does not resolve; check --host"),
    (["--grace", "-1"], "argument --grace: '-1': give 0 or more seconds"),
    (["--max-ended-tasks", "0"], "argument --max-ended-tasks"),
    (["--store", "mysql://x"], "--store must be 'memory', sqlite:PATH, a redis:// or a "
                               "postgresql:// URL"),
    (["--detach-metadata", "=x"], "--detach-metadata: detach rule '=x' has no key"),
    (["--log-level", "verbose"], "argument --log-level: invalid choice"),
])
def test_a_bad_serve_option_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    line = one_error_line(run("serve", *args))
    assert says in line, line


@pytest.mark.parametrize(("module", "option", "says"), [
    ("prometheus_client", "--metrics", "--metrics needs prometheus-client"),
    ("google/protobuf", "--grpc", "--grpc needs protobuf: pip install 'scoped-a2a[grpc]'"),
    ("google/protobuf", "send --transport grpc",
     "--transport grpc needs protobuf: pip install 'scoped-a2a[grpc]'"),
])
def test_a_missing_extra_is_one_line_and_exit_2(tmp_path: Path, module: str, option: str,
                                                says: str) -> None:
    # The extra is installed here: shadow it with a module that cannot be imported.
    shadow = tmp_path / module / "__init__.py"
    shadow.parent.mkdir(parents=True)
    shadow.write_text("raise ImportError('not installed')\n")
    env = {**ENV, "PYTHONPATH": str(tmp_path) + os.pathsep + ENV["PYTHONPATH"]}
    argv = (["send", "http://127.0.0.1:9/", "hi", "--transport", "grpc"]
            if option.startswith("send") else ["serve", option])
    done = subprocess.run([sys.executable, "-m", "scoped_a2a", *argv], env=env,
                          capture_output=True, text=True, timeout=30)
    assert says in one_error_line(done)
    assert done.returncode == 2, done.stderr


@pytest.mark.parametrize("args", [
    ["send", "http://127.0.0.1:9/", "hi", "--timeout", "-5"],
    ["send", "http://127.0.0.1:9/", "hi", "--timeout", "0"],
    ["send", "notaurl", "hi"],
    ["get", "ftp://127.0.0.1/", "t1"],
])
def test_a_bad_client_option_is_one_line_and_exit_2(args: list[str]) -> None:
    line = one_error_line(run(*args))
    assert ("positive, finite number of seconds" in line) or ("is not an http(s) URL" in line)
    if "notaurl" in args:
        assert "UnsupportedProtocol" not in line
        assert line.startswith("error: argument url: 'notaurl' is not an http(s) URL")


# --- item 9: a Redis store out of reach stops serve at start-up --------------------------------


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_an_unreachable_redis_stops_start_up(command: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    port = ["--port", "0"] if command == "serve" else []
    with ThreadPoolExecutor(2) as pool:  # two process start-ups at once
        at_once, waited = pool.map(lambda extra: run(command, *port, "--store", url, *extra),
                                   [(), ("--store-wait", "0.5")])
    line = one_error_line(at_once)
    assert line.startswith(f"error: Redis at {url} does not answer (")
    assert "--store-wait SECONDS" in line
    line = one_error_line(waited)
    assert f"Redis at {url} does not answer within --store-wait 0.5s" in line


def test_store_wait_waits_for_redis_to_come_up(tmp_path: Path) -> None:
    from .redis.conftest import REDIS_SERVER, RedisServer

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    redis = RedisServer(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--store", redis.url,
         "--store-wait", "60"], env=ENV, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = StderrLog(proc.stderr)
    try:
        time.sleep(0.5)  # serve is waiting for Redis now (or still starting)
        assert "serving on" not in log.text() and proc.poll() is None, log.text()
        redis.start()
        url = log.wait_for(r"serving on (http://\S+)").group(1)
        assert httpx.get(url + ".well-known/agent-card.json", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            redis.stop()
    assert proc.returncode == 0, log.text()


# --- item 10: send --timeout bounds the whole call and hangs up --------------------------------


async def wait_for_end(url: str, task_id: str) -> dict[str, object]:
    async with httpx.AsyncClient(timeout=10) as client:
        with anyio.fail_after(20):
            while True:
                r = await client.post(url, headers={"A2A-Version": "1.0"}, json={
                    "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}})
                task: dict[str, object] = r.json()["result"]
                status = task["status"]
                assert isinstance(status, dict)
                if status["state"] in ("TASK_STATE_CANCELED", "TASK_STATE_COMPLETED",
                                       "TASK_STATE_FAILED"):
                    return task
                await anyio.sleep(0.05)


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
@pytest.mark.anyio
@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
async def test_send_timeout_bounds_the_call_and_the_run_is_cancelled(
        anyio_backend: str, binding: str) -> None:
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        code, out, err = await arun("send", url, "slow 30", "--timeout", "1.5", "--transport",
                                    binding, "--backend", anyio_backend)
        assert code == 124, err
        assert out == ""
        (line,) = err.splitlines()
        said = re.fullmatch(r"error: no answer within --timeout 1.5s; the call was abandoned; "
                            r"task (\S+) is cancelled by its server on the hang-up", line)
        assert said, line
        code, out, err = await arun("list", url, "--json")
        assert code == 0, err
        (task,) = json.loads(out)["tasks"]
        assert task["id"] == said[1]
        ended = await wait_for_end(url, task["id"])
    status = ended["status"]
    assert isinstance(status, dict)
    assert status["state"] == "TASK_STATE_CANCELED"
    assert status["message"]["metadata"]["reason"] == "hang-up"


# --- item 11: TLS options, failures said once and in words -------------------------------------


@pytest.mark.anyio
async def test_send_fails_once_on_stderr(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        code, out, err = await arun("send", url, "fail", "--backend", anyio_backend)
    assert code == 1
    assert out == ""
    assert len(err.splitlines()) == 1
    assert re.fullmatch(r"error: task \w+ failed: RuntimeError \(error id \w+\)[^\n]*\n",
                        err), err


def not_an_agent() -> Starlette:
    """A web site: an HTML page at / and for every unknown path, a JSON object at /json/."""
    page = "<!DOCTYPE html><html><head><title>Shop</title></head><body>" + "x" * 5000 + "</body>"

    async def html(request: Request) -> Response:
        return HTMLResponse(page, status_code=404 if "well-known" in request.url.path else 200)

    async def some_json(request: Request) -> Response:
        return JSONResponse({"hello": "world"})

    async def spa(request: Request) -> Response:
        return HTMLResponse(page)  # a single-page app answers 200 with HTML for every path

    return Starlette(routes=[Route("/json/.well-known/agent-card.json", some_json),
                             Route("/spa/{rest:path}", spa),
                             Route("/{rest:path}", html)])


@pytest.mark.anyio
async def test_a_url_that_is_no_a2a_agent_is_one_line(anyio_backend: str) -> None:
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            not_an_agent(), port=0, shutdown=shutdown, grace=1.0, task_status=task_status))
        base = f"http://127.0.0.1:{port}/"
        keys = [(path, command) for path in ("", "spa/", "json/") for command in ("send", "get")]
        try:
            answers = await arun_all(*(
                (command, base + path, "hi" if command == "send" else "t1", "--backend",
                 anyio_backend) for path, command in keys))
        finally:
            shutdown.set()
    results = dict(zip(keys, answers, strict=True))
    for (path, _command), (code, out, err) in results.items():
        assert code == 3, err
        assert out == ""
        assert len(err.splitlines()) == 1, err
        assert "<" not in err and "-320" not in err, err
        assert f"{base}{path} is not an A2A agent (check the URL)" in err, err
    assert "answered HTTP 404 with a web page" in results[("", "send")][2]
    assert "answered, but not with JSON" in results[("spa/", "send")][2]
    assert "answered JSON that is not an agent card" in results[("json/", "get")][2]


@pytest.mark.anyio
async def test_send_tls_options(tmp_path: Path, anyio_backend: str) -> None:
    ca, client_ca = trustme.CA(), trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    alice = client_ca.issue_cert("alice@example.test", common_name="alice")
    cert, key = tmp_path / "alice.crt", tmp_path / "alice.key"
    for blob in alice.cert_chain_pems:
        blob.write_to_path(str(cert), append=True)
    alice.private_key_pem.write_to_path(str(key))
    app = A2AApp(demo_agent, authenticate=Authenticator([ClientCertificate()]))
    back = ("--backend", anyio_backend)
    async with served_tls(app, tmp_path, ca, client_ca=client_ca) as url:
        ok = await arun("send", url, "hi", "--cacert", str(ca_file), "--cert", str(cert),
                        "--key", str(key), *back)
        untrusted = await arun("send", url, "hi", *back)
        no_cert = await arun("send", url, "hi", "--cacert", str(ca_file), *back)
    assert ok[0] == 0, ok[2]
    assert ok[1].endswith("completed: You said: hi\n")
    assert untrusted[0] == 3
    assert untrusted[2] == (f"error: cannot reach the agent at {url}: its TLS certificate is "
                            "not trusted; pass --cacert FILE with the CA that issued it\n")
    assert no_cert[0] == 3 and len(no_cert[2].splitlines()) == 1, no_cert[2]
    assert "client certificate" in no_cert[2], no_cert[2]


@pytest.mark.anyio
async def test_a_url_with_the_wrong_scheme_is_named(tmp_path: Path, anyio_backend: str) -> None:
    """https:// to a plain-HTTP agent, and http:// to an HTTPS one: the line says which scheme
    to use, where it used to say only an SSL or protocol error (WRONG_VERSION_NUMBER; "Server
    disconnected without sending a response"), on the client's backend either way."""
    back = ("--backend", anyio_backend)
    async with served(A2AApp(demo_agent)) as plain:
        https = plain.replace("http://", "https://")
        to_plain = await arun("send", https, "hi", *back)
    async with served_tls(A2AApp(demo_agent), tmp_path, trustme.CA()) as tls:
        http = tls.replace("https://", "http://")
        to_tls = await arun("get", http, "some-task", *back)
    assert to_plain[0] == 3 and len(to_plain[2].splitlines()) == 1, to_plain[2]
    assert to_plain[2] == (f"error: cannot reach the agent at {https}: it does not speak TLS "
                           f"there; use {plain}\n"), to_plain[2]
    assert to_tls[0] == 3 and len(to_tls[2].splitlines()) == 1, to_tls[2]
    assert to_tls[2] == (f"error: cannot reach the agent at {http}: it closed the connection "
                         f"without answering; if it serves HTTPS, use {tls}\n"), to_tls[2]


@pytest.mark.anyio
async def test_an_unreachable_address_from_the_card_says_where_it_came_from(
        anyio_backend: str) -> None:
    """A card advertising another address (a --public-url, a proxy's) sends the call there;
    when that fails, the line named only that address, which the user never typed."""
    gone = f"http://127.0.0.1:{free_port()}/a2a/"
    async with served(A2AApp(demo_agent, public_url=gone)) as url:
        code, out, err = await arun("send", url, "hi", "--backend", anyio_backend)
    assert code == 3 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: cannot reach the agent at {gone}: "), err
    assert err.endswith(f" (the address the agent card at {url}.well-known/agent-card.json "
                        "gives)\n"), err


@pytest.mark.parametrize(("args", "says"), [
    (["--cacert", "/no/such/ca.pem"], "error: cannot use --cacert /no/such/ca.pem: no such file"),
    (["--cert", "/no/such/me.pem"], "error: cannot use --cert /no/such/me.pem: no such file"),
    (["--key", "k.pem"], "error: --key needs --cert"),
])
def test_unusable_tls_files_are_one_line(args: list[str], says: str) -> None:
    line = one_error_line(run("send", "https://127.0.0.1:9/", "hi", *args))
    assert line.startswith(says), line


def test_an_out_folder_that_cannot_be_written_is_said_before_sending(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    line = one_error_line(run("send", "http://127.0.0.1:9/", "hi", "--out", str(a_file)))
    assert line == f"error: --out {a_file} is a file, not a folder"
    line = one_error_line(run("send", "http://127.0.0.1:9/", "hi", "--out",
                              str(a_file / "below")))
    assert line.startswith(f"error: cannot write the trajectory to --out {a_file / 'below'}: ")


def first_line_then_hang_up(*args: str) -> tuple[bytes, int, bytes]:
    """Run the CLI, read one line of its stdout, close the pipe (as ``| head -1`` does)."""
    proc = subprocess.Popen([sys.executable, "-m", "scoped_a2a", *args], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        return first, proc.wait(30), err
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.anyio
async def test_a_reader_that_goes_away_ends_the_command_quietly(anyio_backend: str) -> None:
    """``send ... --follow | head -1``: exit status 141 (as SIGPIPE would), no traceback. The
    run prints a trajectory event every 0.1 s for 2 s, so it writes after the reader left."""
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        first, code, err = await anyio.to_thread.run_sync(
            first_line_then_hang_up, "send", url, "slow 2", "--follow", "--backend",
            anyio_backend)
    assert first.startswith(b"[")
    assert code == 141, err
    assert err == b""


# --- item 13: a bad API-key file on SIGHUP ------------------------------------------------------


def test_sighup_with_a_bad_key_file_says_only_that_it_kept_the_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("alice:token-alice-1\nbob:token-bob-1\n")
    proc, _url, log = start("--api-keys", str(keys))
    try:
        keys.write_text("alice:token-alice-1\nthis line has no colon\n")
        proc.send_signal(signal.SIGHUP)
        log.wait_for(r"kept the previous API keys")
        keys.write_text("alice:token-alice-1\nbob:token-bob-1\ncarol:token-carol-1\n")
        proc.send_signal(signal.SIGHUP)
        log.wait_for(r"API keys reloaded from \S+ \(3 keys\)")
    finally:
        text = stop(proc, log)
    assert len(re.findall(r"API keys reloaded", text)) == 1, text
    assert text.index("kept the previous API keys") < text.index("API keys reloaded"), text


# --- item 16: docs, the card verifier's import, the answer hint, the Temporal example ---------


def test_card_verifier_is_importable_from_the_client_package() -> None:
    from scoped_a2a.client import CardSignatureError, CardVerifier
    from scoped_a2a.client.card_verify import CardVerifier as Defined

    assert CardVerifier is Defined
    assert issubclass(CardSignatureError, Exception)


def test_cli_reference_renders_exit_statuses_once_as_a_table() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import cli_reference
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    text = cli_reference.render()
    sections = dict(re.findall(r"^## `(\w+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    assert set(sections) >= {"serve", "send", "get", "list", "cancel", "subscribe", "worker"}
    for name in ("send", "get", "list", "cancel", "subscribe"):
        body = sections[name]
        assert body.count("Exit status:") == 1, name
        assert "| 124 | --timeout passed" in body and "| 3 | the agent" in body, name
        assert "exit status: 0" not in body.lower(), name
    assert "| 0 | the task completed, needs input" in sections["send"]
    serve_text = sections["serve"]
    assert serve_text.count("Serve an agent over A2A") == 1, serve_text[:600]


@pytest.mark.anyio
async def test_the_answer_hint_is_the_command_to_run(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        code, out, err = await arun("send", url, "ask", "--backend", anyio_backend)
        assert code == 0, err
        task_id = re.fullmatch(r"task (\w+) input-required: What should I echo\?\n", out)
        assert task_id, out
        hint = re.fullmatch(r"answer with: (.*)\n", err)
        assert hint, err
        words = shlex.split(hint.group(1))
        assert words[:5] == ["python", "-m", "scoped_a2a", "send", url]
        assert words[words.index("--task-id") + 1] == task_id.group(1)
        words[5] = "pineapple"  # the placeholder for the answer
        code, out, err = await arun(*words[3:], "--backend", anyio_backend)
    assert (code, out) == (0, f"task {task_id.group(1)} completed: You said: pineapple\n"), err


def test_the_temporal_example_without_a_server_ends_in_one_line() -> None:
    pytest.importorskip("temporalio")
    done = subprocess.run(
        [sys.executable, "run.py", "--address", f"127.0.0.1:{free_port()}",
         "--agent", "http://127.0.0.1:9/"],
        cwd=ROOT / "examples" / "temporal", env=ENV, capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        done.stderr.splitlines()[0]] and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: no Temporal server answers at 127.0.0.1:")
