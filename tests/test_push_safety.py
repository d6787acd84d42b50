"""The SSRF guard over real HTTP: refused webhooks get a JSON-RPC error saying why, at send time
and at config time, and are checked again at delivery.

Refusals are tested only with addresses that stay on this machine (127.0.0.2) or with host names
that a stub resolver maps to private addresses; the server never connects to a private range.
"""

from __future__ import annotations

import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.push import PushSettings
from scoped_a2a.push.guard import Allowance, refusal

from .helpers import rpc, served, text_message
from .push_receiver import Receiver, eventually, receiving

pytestmark = pytest.mark.anyio


class StubResolver:
    """Maps host names to addresses; every call is recorded. A list of answers is used in
    turn (the last one repeats), to play a DNS answer that changes."""

    def __init__(self, table: dict[str, list[list[str]]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host.replace(".", "").isdigit():
            return [host]  # an IPv4 literal resolves to itself
        answers = self.table.get(host)
        if answers is None:
            raise OSError(f"stub resolver: unknown host {host}")
        return answers.pop(0) if len(answers) > 1 else answers[0]


def send_with_hook(hook: str, *, v1: bool = True) -> tuple[str, dict[str, object]]:
    if v1:
        return "SendMessage", {"message": text_message("hi"),
                               "configuration": {"taskPushNotificationConfig": {"url": hook}}}
    return "message/send", {"message": text_message("hi", v1=False),
                            "configuration": {"pushNotificationConfig": {"url": hook}}}


@pytest.mark.parametrize("v1", [True, False], ids=["1.0", "0.3"])
async def test_other_loopback_address_is_refused_at_send(v1: bool) -> None:
    app = A2AApp(demo_agent, push=PushSettings(allow_hosts=["127.0.0.1"]))
    async with served(app) as url, httpx.AsyncClient() as client:
        method, params = send_with_hook("http://127.0.0.2:8080/hook", v1=v1)
        body = await rpc(client, url, method, params, version="1.0" if v1 else None)
        err = body["error"]
        assert err["code"] == -32602
        assert "127.0.0.2 is a loopback address" in err["message"]
        assert "--allow-webhook-host 127.0.0.2" in err["message"]
        listed = await rpc(client, url, "ListTasks", {})
        assert listed["result"]["tasks"] == []  # refused before any task was created


async def test_name_resolving_to_private_address_is_refused() -> None:
    resolver = StubResolver({"crm.internal.test": [["10.0.0.7"]],
                             "mixed.test": [["93.184.216.34", "192.168.1.20"]]})
    app = A2AApp(demo_agent, push=PushSettings(allow_hosts=["127.0.0.1"], resolver=resolver))
    async with served(app) as url, httpx.AsyncClient() as client:
        method, params = send_with_hook("http://crm.internal.test/hook")
        err = (await rpc(client, url, method, params))["error"]
        assert err["code"] == -32602
        assert "crm.internal.test resolves to 10.0.0.7, which is a private address" in (
            err["message"])
        # One public answer does not excuse a private one.
        method, params = send_with_hook("https://mixed.test/hook")
        err = (await rpc(client, url, method, params))["error"]
        assert "192.168.1.20, which is a private address" in err["message"]

        # Config time on an existing task: refused, and the stored configs are untouched.
        task = (await rpc(client, url, "SendMessage", {"message": text_message("hi")}))
        task_id = task["result"]["task"]["id"]
        ok = await rpc(client, url, "CreateTaskPushNotificationConfig",
                       {"taskId": task_id, "id": "good", "url": "http://127.0.0.1:9/hook"})
        assert ok["result"]["id"] == "good"
        err = (await rpc(client, url, "CreateTaskPushNotificationConfig",
                         {"taskId": task_id, "id": "good",
                          "url": "http://crm.internal.test/hook"}))["error"]
        assert err["code"] == -32602 and "private address" in err["message"]
        err = (await rpc(client, url, "CreateTaskPushNotificationConfig",
                         {"taskId": task_id, "url": "file:///etc/passwd"}))["error"]
        assert err["code"] == -32602 and "http or https" in err["message"]
        err = (await rpc(client, url, "CreateTaskPushNotificationConfig",
                         {"taskId": task_id, "url": "http://u:p@127.0.0.1/"}))["error"]
        assert err["code"] == -32602 and "credentials" in err["message"]
        listed = await rpc(client, url, "ListTaskPushNotificationConfigs", {"taskId": task_id})
        assert listed["result"]["configs"] == [
            {"url": "http://127.0.0.1:9/hook", "id": "good", "taskId": task_id}]


async def test_dns_answer_is_checked_again_at_delivery() -> None:
    # Public when the config is set, private when delivering (DNS rebinding): the delivery is
    # refused before any connection, and recorded as failed with the reason.
    resolver = StubResolver({"rebind.test": [["93.184.216.34"], ["10.0.0.9"]]})
    app = A2AApp(demo_agent, push=PushSettings(deliver="terminal", resolver=resolver))
    async with served(app) as url, httpx.AsyncClient() as client:
        method, params = send_with_hook("http://rebind.test/hook")
        task = (await rpc(client, url, method, params))["result"]["task"]
        await eventually(lambda: app.push.active == 0)
        body = await rpc(client, url, "scoped_a2a/push/deliveries", {"taskId": task["id"]})
    [record] = body["result"]["deliveries"]
    assert record["status"] == "failed" and record["attempts"] == 1
    assert "rebind.test resolves to 10.0.0.9, which is a private address" in record["reason"]
    assert resolver.calls == ["rebind.test", "rebind.test"]


async def test_allowed_name_is_delivered_to_the_checked_address() -> None:
    receiver = Receiver()
    async with receiving(receiver) as hook:
        port = hook.rsplit(":", 1)[1].split("/")[0]
        resolver = StubResolver({"receiver.test": [["127.0.0.1"]]})
        app = A2AApp(demo_agent, push=PushSettings(
            allow_hosts=["Receiver.Test."], deliver="terminal", resolver=resolver))
        async with served(app) as url, httpx.AsyncClient() as client:
            method, params = send_with_hook(f"http://receiver.test:{port}/hook")
            await rpc(client, url, method, params)
            await eventually(lambda: app.push.active == 0)
    [got] = receiver.requests
    assert got.headers["host"] == f"receiver.test:{port}"  # connected by address, named by host
    assert got.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_push_switched_off() -> None:
    app = A2AApp(demo_agent, push=PushSettings(enabled=False))
    async with served(app) as url, httpx.AsyncClient() as client:
        card = (await client.get(url + ".well-known/agent-card.json")).json()
        assert card["capabilities"]["pushNotifications"] is False
        method, params = send_with_hook("http://127.0.0.1:9/hook")
        assert (await rpc(client, url, method, params))["error"]["code"] == -32003
        err = await rpc(client, url, "ListTaskPushNotificationConfigs", {"taskId": "x"})
        assert err["error"]["code"] == -32003


def test_address_classes() -> None:
    expect = {
        "127.0.0.2": "a loopback address", "::1": "a loopback address",
        "10.1.2.3": "a private address", "172.16.0.1": "a private address",
        "192.168.0.1": "a private address", "fc00::1": "a private address",
        "169.254.169.254": "a link-local address", "fe80::1": "a link-local address",
        "224.0.0.1": "a multicast address", "ff02::1": "a multicast address",
        "0.0.0.0": "an unspecified address", "240.0.0.1": "a private address",
        "100.64.0.1": "a non-public address",
        "::ffff:127.0.0.1": "a loopback address",  # IPv4-mapped
        "2002:a00:1::": "a private address",  # 6to4 around 10.0.0.1
        "64:ff9b::a9fe:a9fe": "a link-local address",  # NAT64 around 169.254.169.254
        "93.184.216.34": None, "2606:4700::1111": None,
    }
    import ipaddress

    assert {a: refusal(ipaddress.ip_address(a)) for a in expect} == expect
    allow = Allowance(["127.0.0.1", "10.8.0.0/16", "Hooks.Internal.", "[::1]"])
    assert allow.allows_name("hooks.internal") and not allow.allows_name("other")
    assert allow.allows_address(ipaddress.ip_address("10.8.3.4"))
    assert allow.allows_address(ipaddress.ip_address("::1"))
    assert not allow.allows_address(ipaddress.ip_address("127.0.0.2"))


async def test_configs_per_task_are_bounded() -> None:
    app = A2AApp(demo_agent, push=PushSettings(allow_hosts=["127.0.0.1"],
                                               max_configs_per_task=2))
    async with served(app) as url, httpx.AsyncClient() as client:
        task_id = (await rpc(client, url, "SendMessage", {"message": text_message("hi")}))[
            "result"]["task"]["id"]
        for n in (1, 2, 2):  # replacing an existing id is not a new config
            ok = await rpc(client, url, "CreateTaskPushNotificationConfig",
                           {"taskId": task_id, "id": f"c{n}", "url": "http://127.0.0.1:9/"})
            assert ok["result"]["id"] == f"c{n}"
        err = await rpc(client, url, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "id": "c3", "url": "http://127.0.0.1:9/"})
        assert err["error"]["code"] == -32602 and "already has 2" in err["error"]["message"]
