"""Every Redis key and channel name of the store, under one prefix (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    """Every Redis key and channel name, under one prefix (several apps can share a Redis)."""

    prefix: str

    @property
    def base(self) -> str:
        return f"{self.prefix}:"

    def task(self, task_id: str) -> str:  # hash: snapshot, position, state, ...
        return f"{self.prefix}:task:{task_id}"

    def log(self, task_id: str) -> str:  # stream: entry id "<position>-0" per event
        return f"{self.prefix}:log:{task_id}"

    def push(self, task_id: str) -> str:  # hash: push config id -> JSON
        return f"{self.prefix}:push:{task_id}"

    def lease(self, task_id: str) -> str:  # string: the token of the worker running it
        return f"{self.prefix}:lease:{task_id}"

    def claim(self, digest: bytes) -> str:  # hash: a message claim (fp, task, pos, made, op)
        return f"{self.prefix}:claim:{digest.hex()}"

    def claims(self, task_id: str) -> str:  # set: the claim keys of a task while it runs
        return f"{self.prefix}:claims:{task_id}"

    @property
    def processes(self) -> str:  # zset: process id -> its lease's expiry, ms (store/liveness.py)
        return f"{self.prefix}:procs"

    def process(self, process_id: str) -> str:  # set: the running tasks a process's lease covers
        return f"{self.prefix}:proc:{process_id}"

    @property
    def tasks(self) -> str:  # zset: task id by creation order (ListTasks)
        return f"{self.prefix}:tasks"

    @property
    def ended(self) -> str:  # zset: ended task id by end time (retention)
        return f"{self.prefix}:ended"

    @property
    def seq(self) -> str:
        return f"{self.prefix}:seq"

    @property
    def runs(self) -> str:  # stream: the durable queue of detached runs
        return f"{self.prefix}:runs"

    def appended(self, task_id: str) -> str:  # channel: the new position, on each append
        return f"{self.prefix}:appended:{task_id}"

    @property
    def cancel(self) -> str:  # channel: a task id whose run must stop now
        return f"{self.prefix}:cancel"

    @property
    def handover(self) -> str:  # channel: hand-over requests, to every process (.handover)
        return f"{self.prefix}:handover"

    def handover_to(self, process_id: str) -> str:  # channel: hand-over messages to one process
        return f"{self.prefix}:handover:{process_id}"
