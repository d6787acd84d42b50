"""A2A's gRPC binding through real hypercorn (HTTP/2, h2c prior knowledge), on both backends,
driven by a plain grpcio stub: every method of ``lf.a2a.v1.A2AService`` (the two streaming ones
included) through the one method layer, errors as gRPC statuses with ``google.rpc.ErrorInfo``
details, metadata (version, timeout), the card's GRPC interface, and the app's other bindings
still served beside it."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.protocol.deadline import BUDGET_KEY
from scoped_a2a.push import PushSettings

from .grpc_client import Stub, error_info, send_request, state
from .helpers import served, text_message

pytestmark = pytest.mark.anyio

CANCELLED: dict[str, float] = {}
"""task id -> when its run saw the cancellation (perf_counter)."""


async def agent(ctx: RunContext) -> str:
    """``sleep N`` sleeps (recording a cancellation), ``ask`` parks on input, else echoes
    with an artifact."""
    text = ctx.text.strip()
    if text.startswith("sleep"):
        await ctx.working("sleeping")
        try:
            await anyio.sleep(float(text.split()[1]))
        except anyio.get_cancelled_exc_class():
            CANCELLED[ctx.task_id] = time.perf_counter()
            raise
        return "slept"
    if text == "ask":
        return f"got {await ctx.ask('what?')}"
    await ctx.artifact(f"echo: {text}", name="reply")
    return f"echo: {text}"


def grpc_app(**kw: Any) -> A2AApp:
    return A2AApp(agent, grpc=True, grace=1.0, **kw)


async def test_every_method_over_grpc() -> None:
    app = grpc_app(extended_card={"description": "the extended card"},
                   push=PushSettings(allow_hosts=["127.0.0.1"]))
    async with served(app) as url:
        stub = Stub(url)
        try:
            # SendMessage, blocking: the completed task with its artifact.
            sent = await stub("SendMessage", send_request("hello"))
            task = sent.task
            assert state(task) == "TASK_STATE_COMPLETED"
            assert task.artifacts[0].parts[0].text == "echo: hello"
            assert task.status.message.parts[0].text == "echo: hello"
            # returnImmediately: answered at once with the working task.
            early = await stub("SendMessage", send_request("sleep 0.3", return_immediately=True))
            assert state(early.task) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
            # GetTask (historyLength).
            got = await stub("GetTask", pb.GetTaskRequest(id=task.id, history_length=1))
            assert got.id == task.id and len(got.history) == 1
            # ListTasks: both tasks, newest first, paged.
            listed = await stub("ListTasks", pb.ListTasksRequest(page_size=1))
            assert len(listed.tasks) == 1 and listed.next_page_token and listed.total_size == 2
            # SendStreamingMessage: the task, then its updates, ending completed.
            events = await stub.stream("SendStreamingMessage", send_request("streamed"))
            kinds = [e.WhichOneof("payload") for e in events]
            assert kinds[0] == "task" and "artifact_update" in kinds
            assert kinds[-1] == "status_update"
            assert pb.TaskState.Name(events[-1].status_update.status.state) == \
                "TASK_STATE_COMPLETED"
            # SubscribeToTask on a parked task, then its follow-up ends the subscription.
            parked = (await stub("SendMessage", send_request("ask"))).task
            assert state(parked) == "TASK_STATE_INPUT_REQUIRED"
            # CancelTask.
            canceled = await stub("CancelTask", pb.CancelTaskRequest(id=parked.id))
            assert state(canceled) == "TASK_STATE_CANCELED"
            sleeper = (await stub("SendMessage", send_request(
                "sleep 0.5", return_immediately=True))).task
            sub = await stub.stream("SubscribeToTask", pb.SubscribeToTaskRequest(id=sleeper.id))
            assert sub[0].WhichOneof("payload") == "task" and sub[0].task.id == sleeper.id
            assert pb.TaskState.Name(sub[-1].status_update.status.state) == \
                "TASK_STATE_COMPLETED"
            # The four push-config methods.
            config = pb.TaskPushNotificationConfig(task_id=task.id, id="hook",
                                                   url="http://127.0.0.1:9/hook", token="t")
            created = await stub("CreateTaskPushNotificationConfig", config)
            assert (created.task_id, created.id, created.url) == (task.id, "hook", config.url)
            fetched = await stub("GetTaskPushNotificationConfig",
                                 pb.GetTaskPushNotificationConfigRequest(task_id=task.id,
                                                                         id="hook"))
            assert fetched.token == "t"
            configs = await stub("ListTaskPushNotificationConfigs",
                                 pb.ListTaskPushNotificationConfigsRequest(task_id=task.id))
            assert [c.id for c in configs.configs] == ["hook"]
            await stub("DeleteTaskPushNotificationConfig",
                       pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook"))
            configs = await stub("ListTaskPushNotificationConfigs",
                                 pb.ListTaskPushNotificationConfigsRequest(task_id=task.id))
            assert list(configs.configs) == []
            # GetExtendedAgentCard: the extended card, with the GRPC interface.
            card = await stub("GetExtendedAgentCard", pb.GetExtendedAgentCardRequest())
            assert card.description == "the extended card"
        finally:
            stub.close()
        # The public card lists the gRPC interface beside the other two; they still serve.
        async with httpx.AsyncClient(timeout=20) as client:
            public = (await client.get(url + ".well-known/agent-card.json")).json()
            bindings = [(i["protocolBinding"], i["url"]) for i in public["supportedInterfaces"]]
            assert ("GRPC", url.split("//")[1].rstrip("/")) in bindings
            assert {"JSONRPC", "HTTP+JSON"} <= {b for b, _ in bindings}
            rest = await client.get(url + f"tasks/{task.id}", headers={"A2A-Version": "1.0"})
            assert rest.json()["id"] == task.id


async def test_errors_are_grpc_statuses_with_error_info() -> None:
    async with served(grpc_app()) as url:
        stub = Stub(url)
        try:
            domain = "a2a-protocol.org"
            err = await stub.fails("GetTask", pb.GetTaskRequest(id="no-such-task"))
            assert error_info(err) == ("NOT_FOUND", [("TASK_NOT_FOUND", domain)])
            assert "no-such-task" in err.details()
            err = await stub.fails("GetExtendedAgentCard", pb.GetExtendedAgentCardRequest())
            assert error_info(err) == ("FAILED_PRECONDITION",
                                       [("EXTENDED_AGENT_CARD_NOT_CONFIGURED", domain)])
            done = (await stub("SendMessage", send_request("x"))).task
            err = await stub.fails("CancelTask", pb.CancelTaskRequest(id=done.id))
            assert error_info(err) == ("FAILED_PRECONDITION", [("TASK_NOT_CANCELABLE", domain)])
            err = await stub.fails("SubscribeToTask", pb.SubscribeToTaskRequest(id=done.id))
            assert error_info(err)[1] == [("UNSUPPORTED_OPERATION", domain)]
            err = await stub.fails("ListTasks", pb.ListTasksRequest(page_size=1000))
            assert error_info(err) == ("INVALID_ARGUMENT", [("INVALID_PARAMS", domain)])
            assert "pageSize" in err.details()
            empty = pb.SendMessageRequest()  # no message: the method layer refuses it
            err = await stub.fails("SendMessage", empty)
            assert error_info(err)[0] == "INVALID_ARGUMENT"
            # a2a-version 0.3 is another service's: refused with VERSION_NOT_SUPPORTED.
            err = await stub.fails("GetTask", pb.GetTaskRequest(id=done.id),
                                   metadata=(("a2a-version", "0.3"),))
            assert error_info(err) == ("FAILED_PRECONDITION",
                                       [("VERSION_NOT_SUPPORTED", domain)])
            # No a2a-version at all: 1.0 (this is the 1.0 service).
            assert (await stub("GetTask", pb.GetTaskRequest(id=done.id), metadata=())).id == \
                done.id
            # A method the service does not have, and bytes that are not the message.
            import grpc

            raw = stub.channel.unary_unary("/lf.a2a.v1.A2AService/NoSuchMethod")
            with pytest.raises(grpc.RpcError) as caught:
                await anyio.to_thread.run_sync(lambda: raw(b"", timeout=10))
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
            garbage = stub.channel.unary_unary("/lf.a2a.v1.A2AService/GetTask")
            with pytest.raises(grpc.RpcError) as caught:
                await anyio.to_thread.run_sync(lambda: garbage(b"\xff\xff\xff", timeout=10))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        finally:
            stub.close()


async def test_grpc_timeout_is_the_runs_deadline() -> None:
    """``grpc-timeout`` becomes the deadline extension's budget: a detached run (which the
    client's own give-up does not end) is cancelled at it, reason ``deadline``. The budget is
    what is left of the call's deadline, so the server's answer (the canceled task) and the
    client's own DEADLINE_EXCEEDED race at that moment: either is right."""
    import grpc

    async with served(grpc_app()) as url:
        stub = Stub(url)
        try:
            try:
                sent = await stub("SendMessage", send_request(
                    "sleep 30", metadata={"onDisconnect": "continue"}), timeout=0.5)
            except grpc.RpcError as err:
                assert err.code().name == "DEADLINE_EXCEEDED", err
            else:
                assert state(sent.task) == "TASK_STATE_CANCELED", sent
            listed = await stub("ListTasks", pb.ListTasksRequest())
            [task] = listed.tasks
            with anyio.fail_after(5):
                while state(task) != "TASK_STATE_CANCELED":
                    await anyio.sleep(0.05)
                    task = await stub("GetTask", pb.GetTaskRequest(id=task.id))
            assert task.status.message.metadata["reason"] == "deadline"
            # An earlier budget in the request's own metadata wins over a later grpc-timeout.
            req = send_request("sleep 30", metadata={BUDGET_KEY: 200})
            t0 = time.perf_counter()
            answered = await stub("SendMessage", req, timeout=20)
            assert time.perf_counter() - t0 < 5
            assert state(answered.task) == "TASK_STATE_CANCELED"
        finally:
            stub.close()


async def test_a_grpc_only_client_and_json_rpc_share_one_task() -> None:
    """The same task seen over gRPC and JSON-RPC: one method layer, one store."""
    async with served(grpc_app()) as url, httpx.AsyncClient(timeout=20) as client:
        stub = Stub(url)
        try:
            r = await client.post(url, headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": text_message("from json")}})
            task_id = r.json()["result"]["task"]["id"]
            got = await stub("GetTask", pb.GetTaskRequest(id=task_id))
            assert got.artifacts[0].parts[0].text == "echo: from json"
        finally:
            stub.close()


async def test_gzip_requests_and_resumed_subscriptions() -> None:
    """A gzip-compressed request message is read (``grpc-encoding: gzip``); ``last-event-id``
    metadata resumes a subscription after that log position, as the header does on SSE."""
    import grpc

    async with served(grpc_app()) as url:
        stub = Stub(url)
        try:
            sent = await stub("SendMessage", send_request("zipped " + "z" * 5000),
                              compression=grpc.Compression.Gzip)
            assert sent.task.artifacts[0].parts[0].text.startswith("echo: zipped zzz")
            sleeper = (await stub("SendMessage", send_request(
                "sleep 0.5", return_immediately=True))).task
            everything = await stub.stream("SubscribeToTask",
                                           pb.SubscribeToTaskRequest(id=sleeper.id))
            assert everything[0].WhichOneof("payload") == "task"
            sleeper = (await stub("SendMessage", send_request(
                "sleep 0.5", return_immediately=True))).task
            resumed = await stub.stream("SubscribeToTask",
                                        pb.SubscribeToTaskRequest(id=sleeper.id),
                                        metadata=(("a2a-version", "1.0"),
                                                  ("last-event-id", "0")))
            # From position 0 on: no snapshot first, the logged events themselves.
            assert resumed and resumed[0].WhichOneof("payload") != "task"
            assert pb.TaskState.Name(resumed[-1].status_update.status.state) == \
                "TASK_STATE_COMPLETED"
        finally:
            stub.close()
