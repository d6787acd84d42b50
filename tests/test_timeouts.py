"""A call that times out leaves nothing to the cyclic collector (src/scoped_a2a/timeouts.py).

``anyio.fail_after`` is a ``@contextmanager`` generator; on Python 3.12+ the TimeoutError it
raises leaves its frames in a reference cycle, and through ``f_back`` the frame of the code that
timed out (its request, its body). The package's own ``fail_after`` is a class around a cancel
scope and makes none. Checked here with the collector off (as tests/test_exception_cycles.py):
the helper itself, and a timed-out call at four of its sites: the push guard's resolution, a
follower's trajectory read, a client call over HTTP to an agent that never answers, and a run's
wait for the caller's input (its ``InputTimeout``) served by hypercorn; and the SSE write
deadline that gives up on a client that stopped reading (a class for the same reason). The
HTTP call is checked for the deadline's frames and the call's own (its given-up connection
leaves cycles of its own, in httpx and anyio, on 3.11 as on 3.13). Two tests show that the
checks find anyio's cycle where it exists (3.12+); on 3.11 anyio's makes none here
(tests/redis/test_redis_deadline_cycle.py checks the Redis store's command deadline).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext, RunPolicy
from scoped_a2a.client import A2AClient
from scoped_a2a.client.errors import AgentTimeout
from scoped_a2a.client.follower import Follower
from scoped_a2a.push import guard
from scoped_a2a.push.guard import Allowance, WebhookRefused, check_url
from scoped_a2a.server.sse import SlowConsumer, SSEWriter
from scoped_a2a.testing.proxy import FaultyProxy
from scoped_a2a.timeouts import fail_after

from .helpers import rpc, served, text_message
from .test_exception_cycles import collector_off

pytestmark = pytest.mark.anyio

PY312 = sys.version_info >= (3, 12)
SRC = Path(__file__).resolve().parent.parent / "src" / "scoped_a2a"
DEADLINE_CODE = {"fail_after", "fail_at"}  # anyio's and trio's generator frames


async def settle() -> None:
    """A few checkpoints: the event loop lets go of what the last wake-up held (the latest
    cancellation, under pytest), so that only cycles are left to count."""
    for _ in range(3):
        await anyio.lowlevel.checkpoint()


def frames(found: list[Any], *names: str) -> list[str]:
    """The frames among the collector's finds that belong to a deadline (anyio's or trio's
    generator, or this package's ``fail_after``) or are named ``names``."""
    shown = []
    for obj in found:
        try:
            if not isinstance(obj, FrameType):
                continue
        except ReferenceError:  # a weak proxy whose object is gone
            continue
        code = obj.f_code
        if code.co_name in DEADLINE_CODE or code.co_name in names or (
                code.co_filename.endswith("timeouts.py") and "scoped_a2a" in code.co_filename):
            shown.append(f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]})")
    return shown


def kinds(found: list[Any]) -> str:
    """What the collector found, by type, for a failure message (bounded)."""
    counts: dict[str, int] = {}
    for obj in found:
        counts[type(obj).__name__] = counts.get(type(obj).__name__, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])[:12])


# --- the helper -------------------------------------------------------------------------------


async def _times_out(deadline: Any) -> None:
    with deadline(0.01):
        await anyio.sleep(5)


async def test_anyio_fail_after_leaves_a_cycle_that_these_checks_find() -> None:
    # The reason for the helper, and proof that the checks below can fail: the same timed-out
    # block under anyio's fail_after leaves its frames to the collector on 3.12+.
    await _catch(_times_out(anyio.fail_after))  # first use: caches filled outside the count
    await settle()
    with collector_off() as found:
        await _catch(_times_out(anyio.fail_after))
        await settle()
    if PY312:
        assert frames(found, "_times_out"), f"no cycle found: {kinds(found)}"
    else:  # measured: none on 3.11, on both backends
        assert frames(found, "_times_out") == [], kinds(found)


async def _catch(call: Any) -> str:
    """Await ``call``; the message of the TimeoutError it must raise (nothing else kept)."""
    try:
        await call
    except TimeoutError as exc:
        return str(exc) or type(exc).__name__
    raise AssertionError("no TimeoutError")


async def test_fail_after_times_out_without_a_cycle() -> None:
    await _catch(_times_out(fail_after))
    await settle()
    for attempt in range(2):
        with collector_off() as found:
            message = await _catch(_times_out(fail_after))
            await settle()
        assert found == [], f"attempt {attempt}: left to the collector: {kinds(found)}"
    assert message == "TimeoutError"


async def test_fail_after_says_its_reason_and_lets_everything_else_through() -> None:
    with pytest.raises(TimeoutError, match=r"^no answer within 0\.01 s$"), \
            fail_after(0.01, reason="no answer within 0.01 s"):
        await anyio.sleep(5)
    # The block's own errors, a TimeoutError included, come out unchanged.
    own = TimeoutError("the block's own")
    with pytest.raises(TimeoutError) as raised, fail_after(5):
        raise own
    assert raised.value is own
    with pytest.raises(ValueError, match="bad"), fail_after(5):
        await anyio.sleep(0)
        raise ValueError("bad")
    # A cancellation from outside is not a timeout: it ends the outer scope, quietly.
    with anyio.move_on_after(0.01) as outer:
        with fail_after(5):
            await anyio.sleep(5)
    assert outer.cancelled_caught
    # No bound, and a block that ends in time: nothing raised.
    with fail_after(None):
        await anyio.sleep(0.01)
    with fail_after(5):
        await anyio.sleep(0)
    # An already past deadline ends the block at its first checkpoint.
    with pytest.raises(TimeoutError), fail_after(-1):
        await anyio.sleep(0)


def test_no_module_uses_the_generator_deadlines() -> None:
    # Every deadline in src/ that raises goes through scoped_a2a.timeouts.fail_after.
    banned = {("anyio", "fail_after"), ("anyio", "fail_at"), ("trio", "fail_after"),
              ("trio", "fail_at")}
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                    node.value.id, node.attr) in banned:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {node.value.id}."
                                 f"{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module in ("anyio", "trio"):
                offenders += [f"{path.relative_to(SRC)}:{node.lineno} from {node.module} "
                              f"import {a.name}" for a in node.names
                              if (node.module, a.name) in banned]
    assert offenders == [], "use scoped_a2a.timeouts.fail_after:\n" + "\n".join(offenders)


# --- its sites --------------------------------------------------------------------------------


async def _never_resolves(host: str, port: int) -> list[str]:
    await anyio.sleep(5)
    return []


async def _refused(resolve_within: float) -> str:
    try:
        await check_url("https://hooks.example.com/x", Allowance(()), _never_resolves,
                        resolve_within=resolve_within)
    except WebhookRefused as exc:
        return str(exc)
    raise AssertionError("the URL was not refused")


async def test_push_guard_resolution_timeout_leaves_no_cycle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    await _refused(0.01)
    await settle()
    with collector_off() as found:
        message = await _refused(0.01)
        await settle()
    assert found == [], f"left to the collector: {kinds(found)}"
    assert message == "the webhook host 'hooks.example.com' did not resolve within 0.01s"
    if PY312:  # the same check finds the cycle of anyio's deadline at this site
        monkeypatch.setattr(guard, "fail_after", anyio.fail_after)
        await _refused(0.01)
        await settle()
        with collector_off() as found:
            await _refused(0.01)
            await settle()
        assert frames(found, "check_url"), f"no cycle found: {kinds(found)}"


class _SilentSource:
    """A trajectory source whose reads never answer."""

    async def read_trajectory(self, task_id: str, after: int, **limits: Any) -> Any:
        await anyio.sleep(5)


async def _read_times_out(follower: Follower) -> str:
    try:
        await follower._read()
    except AgentTimeout as exc:
        return str(exc)
    raise AssertionError("the read did not time out")


async def test_follower_read_timeout_leaves_no_cycle() -> None:
    async def sink(page: Any) -> None:
        pass

    follower = Follower(_SilentSource(), "t1", sink, mode="read",  # type: ignore[arg-type]
                        read_timeout=0.01)
    await _read_times_out(follower)
    await settle()
    with collector_off() as found:
        message = await _read_times_out(follower)
        await settle()
    assert found == [], f"left to the collector: {kinds(found)}"
    assert message == "trajectory read of task t1 timed out"


async def echo(ctx: RunContext) -> str:
    return "done"


async def test_client_call_to_an_agent_that_never_answers_leaves_no_cycle() -> None:
    # Over HTTP through hypercorn, with a proxy that holds GetTask for ever: the client's
    # deadline (RpcTransport.call) ends the call with AgentTimeout.
    async with served(A2AApp(echo)) as url, anyio.create_task_group() as tg:
        proxy = FaultyProxy(int(url.rsplit(":", 1)[1].strip("/")), "hang", methods={"GetTask"})
        port = await tg.start(proxy.serve)
        proxied = f"http://127.0.0.1:{port}/"
        async with A2AClient(proxied, rpc_url=proxied, timeout=0.2) as client:
            task = await client.send("hi")
            left: list[list[str]] = []
            for _ in range(2):  # the first may meet first-use caches
                with collector_off() as found:
                    try:
                        await client.get_task(task.id)
                    except AgentTimeout as exc:
                        message = str(exc)
                    else:
                        pytest.fail("GetTask did not time out")
                    await settle()
                left.append(frames(found, "call", "get_task"))
        proxy.vanish()
    assert left[-1] == [], f"left to the collector: {left[-1]} ({kinds(found)})"
    assert message == f"the agent at http://127.0.0.1:{port}/ did not answer in time"


async def asks(ctx: RunContext) -> str:
    await ctx.ask("which one?")
    return "never"


async def test_a_run_whose_question_goes_unanswered_leaves_no_cycle() -> None:
    # RunContext.next_input's deadline (the server's input timeout), in a run served by
    # hypercorn: the run fails with the input timeout, and nothing of it is left to the
    # collector.
    app = A2AApp(asks, policy=RunPolicy(input_timeout=0.1))
    async with served(app) as url, httpx.AsyncClient() as http:
        states = []
        for _ in range(2):
            first = await rpc(http, url, "SendMessage", {"message": text_message("ask")})
            task_id = first["result"]["task"]["id"]
            with collector_off() as found:
                with fail_after(5):
                    while app.runner.active:
                        await anyio.sleep(0.02)
                await settle()
            left = frames(found, "next_input", "ask", "asks")
            got = await rpc(http, url, "GetTask", {"id": task_id})
            states.append(got["result"]["status"]["state"])
    assert states == ["TASK_STATE_FAILED"] * 2
    assert left == [], f"left to the collector: {left} ({kinds(found)})"


async def _never_takes(message: Any) -> None:
    await anyio.sleep(5)  # a client that stopped reading


async def _slow_consumer() -> str:
    writer = SSEWriter(_never_takes, write_timeout=0.01)
    try:
        with writer.write_deadline():
            await writer.event(b"data: {}", 1)
    except SlowConsumer as exc:
        return type(exc).__name__
    raise AssertionError("the stuck write did not end the stream")


async def test_a_stream_whose_client_stopped_reading_leaves_no_cycle() -> None:
    # The SSE write deadline (server/sse.py) was a @contextmanager generator raising
    # SlowConsumer: the same cycle as anyio's fail_after on 3.12+ (31 objects on asyncio, 54
    # on trio, 3.13), for every stream given up on a client that stopped reading.
    await _slow_consumer()
    await settle()
    with collector_off() as found:
        ended = await _slow_consumer()
        await settle()
    assert found == [], f"left to the collector: {kinds(found)}"
    assert ended == "SlowConsumer"

