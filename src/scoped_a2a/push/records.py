"""Delivery records: what happened to each delivery, for the log and the status method (no I/O).

One record per (task, config, state change). Its ``status`` moves from ``pending`` to exactly one
of ``delivered``, ``failed`` (gave up: retries exhausted, a permanent refusal, or the URL became
unsafe) or ``undelivered`` (the server shut down, or the config was deleted, before it could be
delivered); ``reason`` says why. Records live in memory, bounded: the oldest tasks' records are
dropped first, and never while one of their deliveries is pending.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from ..protocol.types import TaskState, utc_timestamp

Status = Literal["pending", "delivered", "failed", "undelivered"]


@dataclass(slots=True)
class DeliveryRecord:
    task_id: str
    config_id: str
    delivery_id: str
    position: int
    state: TaskState
    url: str
    status: Status = "pending"
    attempts: int = 0
    last_error: str | None = None
    reason: str | None = None
    created_at: str = field(default_factory=utc_timestamp)
    updated_at: str = field(default_factory=utc_timestamp)

    def finish(self, status: Status, reason: str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.updated_at = utc_timestamp()

    def to_json(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "configId": self.config_id,
            "deliveryId": self.delivery_id,
            "position": self.position,
            "state": self.state.value,
            "url": self.url,
            "status": self.status,
            "attempts": self.attempts,
            "lastError": self.last_error,
            "reason": self.reason,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }


class DeliveryLog:
    """The records of recent deliveries, grouped by task, at most about ``max_records``."""

    def __init__(self, max_records: int) -> None:
        self.max_records = max_records
        self._by_task: OrderedDict[str, list[DeliveryRecord]] = OrderedDict()
        self._count = 0

    def add(self, record: DeliveryRecord) -> DeliveryRecord:
        self._by_task.setdefault(record.task_id, []).append(record)
        self._by_task.move_to_end(record.task_id)
        self._count += 1
        self._evict()
        return record

    def for_task(self, task_id: str, config_id: str | None = None) -> list[DeliveryRecord]:
        records = self._by_task.get(task_id, [])
        return [r for r in records if config_id is None or r.config_id == config_id]

    def _evict(self) -> None:
        for task_id in list(self._by_task):
            if self._count <= self.max_records:
                return
            records = self._by_task[task_id]
            if any(r.status == "pending" for r in records):
                continue
            del self._by_task[task_id]
            self._count -= len(records)
