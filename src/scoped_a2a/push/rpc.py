"""The push-notification JSON-RPC methods, in 1.0 and 0.3 shapes, plus our delivery-status read.

- ``CreateTaskPushNotificationConfig`` (params: the config) = 0.3
  ``tasks/pushNotificationConfig/set`` (``{taskId, pushNotificationConfig}``);
- ``GetTaskPushNotificationConfig`` ``{taskId, id}`` = ``.../get``
  ``{id, pushNotificationConfigId}``;
- ``ListTaskPushNotificationConfigs`` ``{taskId}`` = ``.../list`` ``{id}``;
- ``DeleteTaskPushNotificationConfig`` ``{taskId, id}`` = ``.../delete``
  ``{id, pushNotificationConfigId}``.

``scoped_a2a/push/deliveries`` ``{taskId, configId?}`` answers ``{"deliveries": [...]}``: one record
per state change and config, with ``status`` (pending, delivered, failed, undelivered),
``attempts``, ``lastError`` and ``reason`` (see :mod:`.records`).

Errors: an unknown task is -32001; an unknown config on get is -32001 too (as the official SDK
answers); a refused URL or malformed config is -32602 with the reason. Deleting a config that does
not exist succeeds (delete is idempotent).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..protocol import v03
from ..protocol.errors import InvalidParams, TaskNotFound
from ..protocol.jsonrpc import decode_params
from ..protocol.method import Call, Method, Output
from ..protocol.principal import owner_key
from ..protocol.types import TaskPushConfigRequest, TaskPushNotificationConfig, Wire
from ..store.base import TaskStore
from .service import PushService

DELIVERIES_METHOD = "scoped_a2a/push/deliveries"
_encode = msgspec.json.Encoder().encode


class DeliveriesRequest(Wire):
    task_id: str
    config_id: str | None = None
    tenant: str | None = None


class PushRpc:
    """The handlers; ``table`` maps 1.0 method names (and ours) to them."""

    def __init__(self, service: PushService, store: TaskStore) -> None:
        self.service = service
        self.store = store
        self.table: dict[str, Method] = {
            "CreateTaskPushNotificationConfig": self.create,
            "GetTaskPushNotificationConfig": self.get,
            "ListTaskPushNotificationConfigs": self.list,
            "DeleteTaskPushNotificationConfig": self.delete,
            DELIVERIES_METHOD: self.deliveries,
        }

    async def create(self, call: Call, out: Output) -> None:
        config: TaskPushNotificationConfig
        if call.dialect.v1:
            config = decode_params(call.rpc.params, TaskPushNotificationConfig)
        else:
            p = decode_params(call.rpc.params, v03.TaskPushConfig03)
            config = v03.push_config_from_v03(p.push_notification_config, p.task_id)
        task_id = _required(config.task_id, "taskId")
        # An unknown task (or another caller's) is -32001 before the URL is judged.
        await self.store.check_owner(task_id, owner_key(call.principal, config.tenant))
        config = await self.service.accept(config)
        stored = await self.service.set_config(task_id, config, v1=call.dialect.v1)
        await out.result(call.dialect.push_config(stored))

    async def get(self, call: Call, out: Output) -> None:
        tenant = None
        if call.dialect.v1:
            p = decode_params(call.rpc.params, TaskPushConfigRequest)
            task_id, config_id, tenant = _required(p.task_id, "taskId"), p.id, p.tenant
        else:
            q = decode_params(call.rpc.params, v03.GetPushConfigParams03)
            task_id, config_id = _required(q.id, "id"), q.push_notification_config_id
        await self.store.check_owner(task_id, owner_key(call.principal, tenant))
        configs = await self.store.push_configs(task_id)
        # Without an id (0.3 allows it): the config named after the task, else the first one.
        wanted = config_id or task_id
        found = next((c for c in configs if c.id == wanted), None)
        if found is None and not config_id and configs:
            found = configs[0]
        if found is None:
            what = f" {config_id!r}" if config_id else ""
            raise TaskNotFound(f"task {task_id!r} has no push notification config{what}")
        await out.result(call.dialect.push_config(found))

    async def list(self, call: Call, out: Output) -> None:
        tenant = None
        if call.dialect.v1:
            req = decode_params(call.rpc.params, TaskPushConfigRequest)
            task_id, tenant = _required(req.task_id, "taskId"), req.tenant
        else:
            task_id = _required(decode_params(call.rpc.params, v03.TaskIdParams03).id, "id")
        await self.store.check_owner(task_id, owner_key(call.principal, tenant))
        await out.result(call.dialect.push_configs(await self.store.push_configs(task_id)))

    async def delete(self, call: Call, out: Output) -> None:
        tenant = None
        if call.dialect.v1:
            p = decode_params(call.rpc.params, TaskPushConfigRequest)
            task_id, config_id = _required(p.task_id, "taskId"), _required(p.id, "id")
            tenant = p.tenant
        else:
            q = decode_params(call.rpc.params, v03.DeletePushConfigParams03)
            task_id = _required(q.id, "id")
            config_id = _required(q.push_notification_config_id, "pushNotificationConfigId")
        await self.store.check_owner(task_id, owner_key(call.principal, tenant))
        await self.service.delete_config(task_id, config_id)
        await out.result(b"null")

    async def deliveries(self, call: Call, out: Output) -> None:
        p = decode_params(call.rpc.params, DeliveriesRequest)
        # Unknown task (or another caller's): -32001; known: its records, maybe none.
        await self.store.check_owner(_required(p.task_id, "taskId"),
                                     owner_key(call.principal, p.tenant))
        records = self.service.records.for_task(p.task_id, p.config_id)
        result: dict[str, Any] = {"deliveries": [r.to_json() for r in records]}
        await out.result(_encode(result))


def _required(value: str | None, name: str) -> str:
    if not value:
        raise InvalidParams(f"{name} is required")
    return value
