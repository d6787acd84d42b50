"""Authentication and owner scoping over gRPC: the same authenticators and rules as JSON-RPC and
HTTP+JSON, credentials in metadata (API keys, JWT bearer) or on the connection (client
certificates, gRPC over TLS negotiated by ALPN). Another owner's task is NOT_FOUND; a missing
credential is UNAUTHENTICATED. Real hypercorn, both backends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import grpc
import pytest
import trustme
from a2a.types import a2a_pb2 as pb

from scoped_a2a import A2AApp, serve
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys
from scoped_a2a.server.auth.bearer_jwt import JwksKeys, JwtBearer
from scoped_a2a.server.tls import ClientCertificate

from .auth_tokens import AUDIENCE, ISSUER, SigningKey, jwks
from .grpc_client import V1, Stub, error_info, send_request, state
from .helpers import served
from .test_auth_matrix import asking_agent

pytestmark = pytest.mark.anyio
DOMAIN = "a2a-protocol.org"


def with_key(secret: str) -> tuple[tuple[str, str], ...]:
    return (*V1, ("x-api-key", secret))


async def test_api_keys_and_owner_scoping_over_grpc(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-secret\nbob:bob-secret\n")
    app = A2AApp(asking_agent, authenticate=Authenticator([ApiKeys(keys)]), grace=1.0,
                 grpc=True)
    async with served(app) as url:
        stub = Stub(url)
        try:
            err = await stub.fails("ListTasks", pb.ListTasksRequest())
            assert error_info(err) == ("UNAUTHENTICATED", [("UNAUTHENTICATED", DOMAIN)])
            err = await stub.fails("SendMessage", send_request("hi"),
                                   metadata=with_key("wrong"))
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED
            assert app.auth_failures == 2
            alice = await stub("SendMessage", send_request("ask"),
                               metadata=with_key("alice-secret"))
            assert state(alice.task) == "TASK_STATE_INPUT_REQUIRED"
            tid = alice.task.id
            # bob: alice's task does not exist for him, on every task method.
            for method, request in (
                ("GetTask", pb.GetTaskRequest(id=tid)),
                ("CancelTask", pb.CancelTaskRequest(id=tid)),
                ("SubscribeToTask", pb.SubscribeToTaskRequest(id=tid)),
                ("ListTaskPushNotificationConfigs",
                 pb.ListTaskPushNotificationConfigsRequest(task_id=tid)),
            ):
                err = await stub.fails(method, request, metadata=with_key("bob-secret"))
                assert error_info(err) == ("NOT_FOUND", [("TASK_NOT_FOUND", DOMAIN)]), method
            follow = send_request("x")
            follow.message.task_id = tid
            err = await stub.fails("SendMessage", follow, metadata=with_key("bob-secret"))
            assert err.code() == grpc.StatusCode.NOT_FOUND
            listed = await stub("ListTasks", pb.ListTasksRequest(),
                                metadata=with_key("bob-secret"))
            assert list(listed.tasks) == []
            # alice: her own task, and her follow-up ends it.
            listed = await stub("ListTasks", pb.ListTasksRequest(),
                                metadata=with_key("alice-secret"))
            assert [t.id for t in listed.tasks] == [tid]
            follow = send_request("yes")
            follow.message.task_id = tid
            done = await stub("SendMessage", follow, metadata=with_key("alice-secret"))
            assert done.task.status.message.parts[0].text == "alice said yes"
        finally:
            stub.close()


async def test_jwt_bearer_over_grpc(tmp_path: Path) -> None:
    key = SigningKey()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(key)))
    bearer = JwtBearer(JwksKeys(str(path)), issuer=ISSUER, audience=AUDIENCE)
    app = A2AApp(asking_agent, authenticate=Authenticator([bearer]), grace=1.0, grpc=True)
    async with served(app) as url:
        stub = Stub(url)
        try:
            token = (*V1, ("authorization", f"Bearer {key.token('carol')}"))
            answer = await stub("SendMessage", send_request("hi"), metadata=token)
            assert answer.task.status.message.parts[0].text == "hello carol"
            expired = (*V1, ("authorization", f"Bearer {key.token('carol', exp_in=-600)}"))
            err = await stub.fails("GetTask", pb.GetTaskRequest(id=answer.task.id),
                                   metadata=expired)
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            stub.close()


@asynccontextmanager
async def served_tls(app: A2AApp, tmp_path: Path, ca: trustme.CA,
                     client_ca: trustme.CA) -> AsyncIterator[str]:
    server_pem = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(server_pem))
    ca_file = tmp_path / "client-ca.pem"
    client_ca.cert_pem.write_to_path(str(ca_file))
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, shutdown=shutdown, certfile=str(server_pem),
            keyfile=str(server_pem), ca_certs=str(ca_file), task_status=task_status))
        try:
            yield f"https://localhost:{port}/"
        finally:
            shutdown.set()


def tls_credentials(ca: trustme.CA, cert: trustme.LeafCert | None) -> grpc.ChannelCredentials:
    if cert is None:
        return grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
    key_pem = cert.private_key_pem.bytes()
    chain = b"".join(blob.bytes() for blob in cert.cert_chain_pems)
    return grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes(),
                                        private_key=key_pem, certificate_chain=chain)


async def test_grpc_over_tls_with_client_certificates(tmp_path: Path) -> None:
    """``--certfile``: gRPC over TLS (HTTP/2 by ALPN); the client certificate names the
    principal exactly as on HTTPS."""
    ca, client_ca = trustme.CA(), trustme.CA()
    alice = client_ca.issue_cert("alice@example.test", common_name="alice")
    bob = client_ca.issue_cert("bob@example.test", common_name="bob")
    app = A2AApp(asking_agent, authenticate=Authenticator([ClientCertificate()]), grace=1.0,
                 grpc=True)
    async with served_tls(app, tmp_path, ca, client_ca) as url:
        as_alice = Stub(url, credentials=tls_credentials(ca, alice))
        as_bob = Stub(url, credentials=tls_credentials(ca, bob))
        anonymous = Stub(url, credentials=tls_credentials(ca, None))
        try:
            task = (await as_alice("SendMessage", send_request("hi"))).task
            assert task.status.message.parts[0].text == "hello alice"
            err = await as_bob.fails("GetTask", pb.GetTaskRequest(id=task.id))
            assert err.code() == grpc.StatusCode.NOT_FOUND
            err = await anonymous.fails("GetTask", pb.GetTaskRequest(id=task.id))
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            for stub in (as_alice, as_bob, anonymous):
                stub.close()
