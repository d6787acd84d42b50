"""fasta2a (AnyIO-based) serving the benchmark agent on uvicorn, through its 1.0 method names.

fasta2a's own worker loop runs one task at a time; a deployment scales it with more workers. To
compare like with like, the worker here starts every task in a task group of its own (one
process, unbounded concurrency, like the other servers). fasta2a answers ``SendMessage`` with a
``submitted`` task at once and never waits for the agent; its streams and subscriptions relay
what the worker publishes. It cancels a run only on ``CancelTask``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from fasta2a import FastA2A, Worker
from fasta2a.broker import InMemoryBroker
from fasta2a.schema import Artifact, Part, TaskIdParams, TaskSendParams
from fasta2a.storage import InMemoryStorage

from benchmarks.peers._serve import arguments, run
from benchmarks.sidechannel import go_file, signal


@dataclass
class BenchWorker(Worker[Any]):
    _tg: TaskGroup | None = field(default=None, init=False)
    _scopes: dict[str, anyio.CancelScope] = field(default_factory=dict, init=False)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            async with super().run():
                yield
            tg.cancel_scope.cancel()

    async def run_task(self, params: TaskSendParams) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._work, params)

    async def cancel_task(self, params: TaskIdParams) -> None:
        scope = self._scopes.get(params["id"])
        if scope is not None:
            scope.cancel()

    async def _work(self, params: TaskSendParams) -> None:
        task_id, context_id = params["id"], params["context_id"]
        text = " ".join(p.get("text", "") for p in params["message"]["parts"])
        await self.storage.update_task(task_id, state="working")
        await self.publish_status(task_id, context_id, "working")
        state = "completed"
        artifacts: list[Artifact] = []
        with anyio.CancelScope() as scope:
            self._scopes[task_id] = scope
            try:
                artifacts = await self._command(task_id, context_id, text.split())
            except Exception:
                state = "failed"
            finally:
                self._scopes.pop(task_id, None)
        if scope.cancelled_caught:
            state = "canceled"
        await self.storage.update_task(task_id, state=state, new_artifacts=artifacts)
        await self._end_stream(task_id, context_id, state)

    async def _artifact(self, task_id: str, context_id: str, artifact_id: str, name: str,
                        text: str, *, append: bool = False, last: bool = True) -> Artifact:
        artifact = Artifact(artifact_id=artifact_id, name=name, parts=[Part(text=text)])
        await self.publish_artifact(task_id, context_id, artifact, append=append, last_chunk=last)
        return artifact

    async def _command(self, task_id: str, context_id: str, words: list[str]) -> list[Artifact]:
        command = words[0]
        if command == "echo":
            text = "echo: " + " ".join(words)
            return [await self._artifact(task_id, context_id, uuid.uuid4().hex, "echo", text)]
        if command == "stream":
            n = int(words[1])
            for i in range(n):
                await self._artifact(task_id, context_id, "stream", "stream", f"{i} ",
                                     append=i > 0, last=i == n - 1)
            return []
        if command == "slow":
            key = words[1]
            signal("start", key)
            try:
                await anyio.sleep(float(words[2]))
            except anyio.get_cancelled_exc_class():
                signal("cancel", key)
                raise
            signal("done", key)
            return []
        if command == "fanout":
            key, n, interval = words[1], int(words[2]), float(words[3])
            signal("start", key)
            path = go_file(key)
            with anyio.fail_after(120):
                while path is not None and not os.path.exists(path):
                    await anyio.sleep(0.002)
            for i in range(n):
                await self._artifact(task_id, context_id, "fan", "fan",
                                     f"fan {i} @T{time.monotonic():.9f}@",
                                     append=i > 0, last=i == n - 1)
                await anyio.sleep(interval)
            return []
        if command == "event":
            key, seconds = words[1], float(words[2])
            try:
                for _ in range(10):
                    await anyio.sleep(seconds / 10)
            except anyio.get_cancelled_exc_class():
                signal("cancel", key)
                raise
            signal("done", key)
            return []
        raise ValueError(f"unknown benchmark command {command!r}")

    def build_message_history(self, history: list[Any]) -> list[Any]:
        return history

    def build_artifacts(self, result: Any) -> list[Artifact]:
        return []


def build_app(port: int) -> FastA2A:
    storage: InMemoryStorage[Any] = InMemoryStorage()
    broker = InMemoryBroker()
    worker = BenchWorker(broker=broker, storage=storage)

    @asynccontextmanager
    async def lifespan(app: FastA2A) -> AsyncIterator[None]:
        async with app.task_manager, worker.run():
            yield

    return FastA2A(storage=storage, broker=broker, name="bench",
                   url=f"http://127.0.0.1:{port}/", lifespan=lifespan)


if __name__ == "__main__":
    args = arguments(__doc__.splitlines()[0]).parse_args()
    run(build_app(args.port), args.server, args.port)
