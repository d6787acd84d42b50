"""The worker of the durable run queues: executes queued detached runs, each under a lease kept
alive by a heartbeat. One worker for every store that offers a queue
(:class:`~scoped_a2a.store.launcher.DurableQueue`: Redis, SQLite); it lives in the runtime layer
because it starts runs, and the stores never import it.

Ownership. :meth:`Worker.run` is one task (in ``serve``'s server nursery, or the ``worker``
command's): it reads the queue and starts one job task per run in its own task group; each run
itself executes in the runner's nursery, exactly like a run started by a send, so the runner's
shutdown (grace period, then cancel) applies to it. The worker stops taking runs as soon as the
runner is closing, and returns once its jobs are done.

Delivery. A run is taken from the queue (new entries first, then entries idle for
``claim_idle`` seconds whose worker died or stalled, or every entry a killed process left), its
lease is taken (one attempt), and it is
executed with ``ctx.attempt`` set. Every ``claim_idle / 4`` seconds the heartbeat renews the lease
and the entry's idle time together. If the lease is lost (the store unreachable for most
of ``claim_idle``, or taken over), the run is cancelled at once and records nothing: the worker
that takes it over runs it again. Once the run's end is recorded the entry is acknowledged.

Errors. Store trouble never ends the worker: it backs off (capped at 1 s) and tries again.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import anyio

from ..protocol.errors import ServerUnavailable, UnsupportedOperation
from ..protocol.ids import new_id
from ..protocol.principal import principal_of_owner
from ..store.launcher import DurableQueue, Job
from ..store.outage_log import OutageLog
from .run import Run
from .runner import Runner

log = logging.getLogger("scoped_a2a.worker")
_outages = OutageLog(log)  # one line per few seconds while the store is away, not one per call


class Worker:
    """One consumer of the run queue, executing up to ``concurrency`` runs at a time."""

    def __init__(
        self,
        queue: DurableQueue,
        runner: Runner,
        *,
        concurrency: int = 16,
        claim_idle: float = 30.0,
        name: str | None = None,
    ) -> None:
        if concurrency < 1 or claim_idle <= 0:
            raise ValueError("concurrency and claim_idle must be positive")
        self.queue = queue
        self.runner = runner
        self.concurrency = concurrency
        self.claim_idle = claim_idle
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{new_id()[:6]}"
        self.active = 0
        self._freed = anyio.Event()

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.claim_idle * 1000))

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        """Take and execute runs until the runner closes (or this is cancelled)."""
        log.info("worker %s started (concurrency %d, claim idle %.1fs)",
                 self.name, self.concurrency, self.claim_idle)
        backoff = 0.05
        grouped = False
        next_reclaim = 0.0
        block_ms = max(50, min(1000, self._lease_ms // 4))
        async with anyio.create_task_group() as jobs:
            task_status.started()
            while not self.runner.closing:
                free = self.concurrency - self.active
                if free <= 0:
                    await self._freed.wait()
                    continue
                try:
                    if not grouped:
                        await self.queue.prepare()
                        grouped = True
                    batch: list[Job] = []
                    if time.monotonic() >= next_reclaim:
                        next_reclaim = time.monotonic() + self.claim_idle / 4
                        batch = await self.queue.reclaim(self.name, free, self._lease_ms)
                        for job in batch:
                            log.info("reclaimed the run of task %s from a silent worker",
                                     job.task_id)
                    if not batch:
                        batch = await self.queue.read_new(self.name, free, block_ms)
                except ServerUnavailable as exc:
                    _outages.failed("worker", "worker %s: %s (retrying in %.2fs)", self.name,
                                    exc, backoff)
                    grouped = False  # the store may have lost its group: prepare again
                    await anyio.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
                    continue
                backoff = 0.05
                _outages.recovered("worker")
                for job in batch:
                    self.active += 1
                    jobs.start_soon(self._job, job, name=f"scoped_a2a job {job.task_id}")
        log.info("worker %s stopped", self.name)

    async def _job(self, job: Job) -> None:
        """Claim, execute and retire one run. Never raises (a failure leaves it queued)."""
        token = f"{self.name}:{new_id()[:8]}"
        try:
            await self._execute(job, token)
        except ServerUnavailable as exc:
            # The entry stays pending: it is redelivered once its lease and idle time run out.
            _outages.failed("left queued", "run of task %s left queued: %s", job.task_id, exc)
        finally:
            self.active -= 1
            self._freed.set()
            self._freed = anyio.Event()

    async def _execute(self, job: Job, token: str) -> None:
        claimed_at = time.monotonic()
        attempt, task = await self.queue.claim(job, token, self._lease_ms)
        if attempt in (0, -1):  # ended (e.g. canceled while queued) or expired: nothing to run
            await self.queue.retire(job, token)
            return
        if task is None:  # another worker holds the lease and keeps the entry alive
            return
        with self.queue.fenced(job.task_id, token):
            try:
                run = self.runner.start(
                    task, job.message, request_metadata=job.request_metadata,
                    detach_reason=job.detach_reason, attempt=attempt, redeliverable=True,
                    principal=principal_of_owner(job.owner),
                )
            except (ServerUnavailable, UnsupportedOperation) as exc:  # closing / already here
                log.info("run of task %s not started here: %s", job.task_id, exc)
                await self.queue.release(job, token)
                return
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._heartbeat, job, run, token, claimed_at)
                    await run.done.wait()
                    tg.cancel_scope.cancel()
            finally:
                # Retire the entry only if the run's end is recorded; otherwise it is
                # redelivered. Shielded: this runs even when the worker is being cancelled.
                with anyio.move_on_after(5, shield=True):
                    await self.queue.retire(job, token)

    async def _heartbeat(self, job: Job, run: Run, token: str, last_ok: float) -> None:
        """Renew the lease every ``claim_idle / 4`` s; cancel the run once it cannot be held.

        ``last_ok`` is when the last successful renewal was *sent*: the lease is valid until at
        least ``last_ok + claim_idle``, so giving up at three quarters of that leaves time for
        the cancellation to land before another worker may take the run.
        """
        period = self.claim_idle / 4
        while True:
            await anyio.sleep(period)
            sent = time.monotonic()
            status: int | None = None
            with anyio.move_on_after(period):
                try:
                    status = await self.queue.renew(job, self.name, token, self._lease_ms)
                except ServerUnavailable as exc:
                    _outages.failed("renew", "could not renew the lease of task %s: %s",
                                    job.task_id, exc)
            if status is None:
                if time.monotonic() - last_ok > self.claim_idle * 0.75:
                    log.error("lost the lease of task %s (store unreachable); stopping its run",
                              job.task_id)
                    run.cancel("lease-lost")
                    return
                continue
            if status < 0:
                log.error("the lease of task %s went to another worker; stopping its run",
                          job.task_id)
                run.cancel("lease-lost")
                return
            last_ok = sent
            if status == 0:  # ended elsewhere (a CancelTask whose message we missed)
                run.cancel("CancelTask")
