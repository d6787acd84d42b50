"""``ActivityStep``: a :class:`~scoped_a2a.client.step.Step` run inside a Temporal activity.

::

    @activity.defn
    async def run_step(req: StepRequest) -> str:
        async with A2AClient(req.agent_url) as client:
            async with ActivityStep(client, sink=DirectorySink(req.out, resume=True)) as step:
                task = await step.turn(req.message)
        return task.status.state.value

What it adds to a ``Step`` (everything else, followers, drain and sinks, is the step's own):

- **Heartbeats.** A task in the step's task group heartbeats every ``heartbeat_every`` seconds
  (default: a third of the activity's heartbeat timeout), and again as soon as a turn's task is
  known and when a turn ends. Each heartbeat's details are the step's
  :class:`~.progress.StepProgress`: every turn's task id, its follower's cursor, and whether its
  end is recorded. The heartbeats are also how a cancel request reaches the worker: Temporal
  delivers it in a heartbeat's answer.
- **Cancellation.** Temporal cancels the activity's asyncio task (the workflow cancelled it, its
  heartbeat timed out, the worker is shutting down): that cancellation is the step's, so
  followers and the heartbeat task are cancelled at once, no further read is made, every turn's
  end is recorded as for any cancelled step (``canceled``), and the activity function returns
  (raising the cancellation) with nothing left running: its slot is free.
- **Resuming.** A retried attempt reads the last heartbeat's details. Its body must send the
  same turns in the same order (as a workflow replays): a turn the earlier attempt had sent is
  not sent again but taken over with :meth:`Step.rejoin`, its follower starting at the cursor of
  the last heartbeat, moved past the pages a ``DirectorySink`` already holds (the dead attempt
  may have written some after its last heartbeat); a turn whose end was recorded is not followed
  again. So the trajectory on disk has no gap and no duplicate line. Temporal's worker holds
  heartbeats back (at most one per 80% of the heartbeat timeout), so the last one may predate a
  turn's send or end: a sink that records turns (``DirectorySink.turn_task``) fills that in.

Temporal's Python SDK runs activities on asyncio only; this module runs where they run. It uses
AnyIO like the rest of the project: task groups and cancel-scope deadlines only.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import timedelta
from types import TracebackType
from typing import Any

import anyio
from temporalio import activity

from ..client.client import A2AClient
from ..client.step import OnEvent, Step, Turn
from ..protocol.types import Message, Task
from .progress import StepProgress, TurnProgress

log = logging.getLogger("scoped_a2a.temporal")

HEARTBEAT_TASK_NAME = "scoped_a2a heartbeat"
DEFAULT_HEARTBEAT_EVERY = 10.0
"""Seconds between heartbeats of an activity without a heartbeat timeout."""


def heartbeat_interval(timeout: timedelta | None) -> float:
    """Seconds between heartbeats for an activity whose heartbeat timeout is ``timeout``: a
    third of it (two heartbeats may be late before it expires), at least 50 ms;
    :data:`DEFAULT_HEARTBEAT_EVERY` without one."""
    if timeout is None or timeout <= timedelta(0):
        return DEFAULT_HEARTBEAT_EVERY
    return max(0.05, timeout.total_seconds() / 3)


class ActivityStep(Step):
    """A :class:`~scoped_a2a.client.step.Step` that heartbeats its progress to the Temporal
    activity it runs in and resumes from the last heartbeat on a retry (see the module doc).

    Create and enter it inside the activity function. Options are the step's, plus:

    :param heartbeat_every: seconds between heartbeats (default: :func:`heartbeat_interval` of
        the activity's heartbeat timeout).
    :raises RuntimeError: outside a Temporal activity.

    Record for tests and benchmarks: ``attempt``, ``resumed_from`` (the progress read from the
    last heartbeat), ``taken_over_at`` (turn id -> the position a taken-over turn's follower
    started at), ``heartbeats`` (how many were sent), ``cancelled_at`` (``time.monotonic()``
    when the step saw the activity's cancellation).
    """

    def __init__(self, client: A2AClient, *, heartbeat_every: float | None = None,
                 **options: Any) -> None:
        super().__init__(client, **options)
        try:
            info = activity.info()
        except RuntimeError:
            raise RuntimeError(
                "ActivityStep runs inside a Temporal activity function; use Step elsewhere"
            ) from None
        self.attempt = info.attempt
        self.resumed_from = StepProgress.from_details(info.heartbeat_details)
        self.heartbeat_every = (heartbeat_every if heartbeat_every is not None
                                else heartbeat_interval(info.heartbeat_timeout))
        self.heartbeats = 0
        self.cancelled_at: float | None = None
        self.taken_over_at: dict[str, int] = {}  # turn -> the position it was taken over at

    async def __aenter__(self) -> ActivityStep:
        await super().__aenter__()
        assert self._tg is not None
        self._tg.start_soon(self._heartbeat_loop, name=HEARTBEAT_TASK_NAME)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            self.cancelled_at = time.monotonic()
        try:
            return await super().__aexit__(exc_type, exc, tb)
        except anyio.get_cancelled_exc_class():
            if self.cancelled_at is None:  # cancelled while the followers drained
                self.cancelled_at = time.monotonic()
            raise
        finally:
            # Every turn's end is recorded now: say so, for a retry after a heartbeat timeout.
            self.beat()

    # --- heartbeats ---------------------------------------------------------------------------

    def progress(self) -> StepProgress:
        """Where every turn stands now (what the next heartbeat carries)."""
        return StepProgress(tuple(
            TurnProgress(
                turn=t.id, task_id=t.task_id, recorded=t.recorded,
                cursor=(t.follower.cursor if t.follower is not None
                        else self.taken_over_at.get(t.id, 0)),
            )
            for t in self.turns
        ))

    def beat(self) -> None:
        """Heartbeat the step's progress now (Temporal's worker may hold it back until its
        throttle interval, 80% of the heartbeat timeout, has passed since the last one)."""
        activity.heartbeat(self.progress().to_details())
        self.heartbeats += 1

    async def _heartbeat_loop(self) -> None:
        """Heartbeat until the step's task group is cancelled (the step ended)."""
        while True:
            self.beat()
            await anyio.sleep(self.heartbeat_every)

    def _start_follower(self, turn: Turn, task: Task, after: int) -> None:
        super()._start_follower(turn, task, after)
        self.beat()  # the turn's task id must reach Temporal before this worker can die

    # --- turns --------------------------------------------------------------------------------

    async def _earlier(self, index: int) -> TurnProgress | None:
        """What an earlier attempt did with the ``index``-th turn: the last heartbeat says, and a
        sink that can tell (``DirectorySink.turn_task``) fills in what happened after it (a
        turn sent, or ended, less than a heartbeat throttle interval before the worker died)."""
        earlier = self.resumed_from.turn(index)
        turn_task = getattr(self.sink, "turn_task", None)
        if self.attempt < 2 or not callable(turn_task):
            return earlier
        turn_id = f"{index + 1:04d}"
        on_disk = await anyio.to_thread.run_sync(turn_task, turn_id)
        if on_disk is None:
            return earlier
        task_id, ended = on_disk
        if earlier is None:
            return TurnProgress(turn_id, task_id, 0, ended)
        if earlier.task_id == task_id and ended and not earlier.recorded:
            return dataclasses.replace(earlier, recorded=True)
        return earlier

    async def turn(
        self, message: Message | str, *, on_event: OnEvent | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task | Message:
        """Send one turn, as :meth:`Step.turn`, or, when the attempt before this one had sent
        it, take it over from where that attempt's last heartbeat left it (nothing is sent)."""
        earlier = await self._earlier(len(self.turns))
        if earlier is None or earlier.task_id is None:
            result = await super().turn(message, on_event=on_event, metadata=metadata)
        else:
            after = earlier.cursor
            pages_end = getattr(self.sink, "pages_end", None)
            if callable(pages_end) and not earlier.recorded:
                after = await anyio.to_thread.run_sync(pages_end, earlier.turn, after)
            self.taken_over_at[earlier.turn] = after
            log.info("attempt %d: taking over turn %s (task %s) at position %d",
                     self.attempt, earlier.turn, earlier.task_id, after)
            result = await self.rejoin(earlier.task_id, after=after, ended=earlier.recorded,
                                       on_event=on_event)
        self.beat()
        return result
