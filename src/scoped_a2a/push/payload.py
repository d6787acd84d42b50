"""What a delivery sends: the body (the spec's payload) and its headers (no I/O).

Body. A 1.0 config receives a ``StreamResponse``: a state change that does not end the task as
``{"statusUpdate": <TaskStatusUpdateEvent>}``, and the terminal state as ``{"task": <Task>}`` (the
final task with its artifacts and history, which is what a caller that hung up is waiting for). A
0.3 config receives the ``Task`` object itself (``kind: "task"``), with the status of that change.

Headers. ``Idempotency-Key`` is the same on every retry of one delivery and differs between
deliveries (it is derived from task, config and log position, so it is stable across restarts
too): a receiver drops repeats by it. The config's ``token`` travels as
``X-A2A-Notification-Token`` and its ``authentication`` as ``Authorization: <scheme>
<credentials>``; without one, the server's bearer token (if configured) is sent. With a signing
secret, the Standard Webhooks headers carry an HMAC-SHA256 over ``id.timestamp.body``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
import uuid

import msgspec

from ..protocol import v03
from ..protocol.types import Task, TaskPushNotificationConfig, TaskStatusUpdateEvent

log = logging.getLogger("scoped_a2a.push")

_encode = msgspec.json.Encoder().encode
_NAMESPACE = uuid.UUID("5b7c3f0e-6a0a-4d4e-9d51-2f0c4e3a9a11")
USER_AGENT = "scoped-a2a-push/0.1"


def delivery_id(task_id: str, config_id: str, position: int) -> str:
    """The idempotency key of the delivery of log ``position`` to one config."""
    return str(uuid.uuid5(_NAMESPACE, f"{task_id}\x00{config_id}\x00{position}"))


def body(task: Task, event: TaskStatusUpdateEvent, encoded: bytes, *, v1: bool) -> bytes:
    """The payload for the state change ``event`` of ``task`` (``encoded`` is its 1.0 JSON).

    ``task`` is the store's snapshot: it is only read, and encoded before returning.
    """
    if v1:
        if event.status.state.terminal:
            return b'{"task":' + _encode(task) + b"}"
        return b'{"statusUpdate":' + encoded + b"}"
    # 0.3: the Task, as of this change (the snapshot may already be further on).
    return _encode(v03.task_to_v03(msgspec.structs.replace(task, status=event.status)))


def _signing_key(secret: str | bytes) -> bytes:
    if isinstance(secret, bytes):
        return secret
    if secret.startswith("whsec_"):
        return base64.b64decode(secret.removeprefix("whsec_"))
    return secret.encode()


def sign(secret: str | bytes, msg_id: str, timestamp: int, payload: bytes) -> str:
    """The Standard Webhooks signature value (``v1,<base64 HMAC-SHA256>``)."""
    mac = hmac.new(_signing_key(secret), f"{msg_id}.{timestamp}.".encode() + payload,
                   hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def headers(
    config: TaskPushNotificationConfig,
    msg_id: str,
    payload: bytes,
    *,
    host: str,
    bearer_token: str | None,
    signing_secret: str | bytes | None,
) -> dict[str, str]:
    """The headers of one attempt (``host`` is the Host the URL names; we connect by address)."""
    out = {
        "Host": host,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Idempotency-Key": msg_id,
    }
    if config.token:
        out["X-A2A-Notification-Token"] = config.token
    auth = config.authentication
    if auth is not None and auth.scheme and auth.credentials:
        out["Authorization"] = f"{auth.scheme} {auth.credentials}"
    elif auth is not None:
        log.warning("push config %s of task %s names scheme %r but no credentials; sending no "
                    "Authorization header", config.id, config.task_id, auth.scheme)
    elif bearer_token:
        out["Authorization"] = f"Bearer {bearer_token}"
    if signing_secret:
        now = int(time.time())
        out["webhook-id"] = msg_id
        out["webhook-timestamp"] = str(now)
        out["webhook-signature"] = sign(signing_secret, msg_id, now, payload)
    return out
