"""A task's log written to one caller as stream events (SendStreamingMessage, SubscribeToTask),
from a position until the task ends or is interrupted.

What it adds to reading the log: every event a read finds goes out in one write; a reader that
the per-task cap left behind restarts from the snapshot; trajectory events go only to callers
of the trajectory extension; keep-alives follow the bytes actually written; a run whose end
cannot be stored until an operator acts ends the stream with a retryable error at once.

Cancellation (the caller hung up, the request's scope was cancelled) ends it at once, between
or during writes; nothing is held past it. Errors: TaskNotFound if the task is evicted
meanwhile, the lost end's ServerUnavailable (server/end_lost.py), and the write deadline's
(server/sse.py) for a caller that stopped reading.
"""

from __future__ import annotations

from ..protocol.method import Call, Output
from ..protocol.trajectory import TRAJECTORY_EXTENSION_URI, TrajectoryEvent
from ..runtime.run import Run
from ..runtime.tail import ends_stream
from ..store.base import TaskStore
from .end_lost import lost_error
from .frames import FrameCache


class LogStream:
    """Writes task logs to stream callers: one per app, shared by every stream."""

    def __init__(self, store: TaskStore, frames: FrameCache, keepalive_every: float) -> None:
        self.store = store
        self.frames = frames
        """Snapshots and events encoded once, shared by every stream that sends them."""
        self.keepalive_every = keepalive_every

    async def follow(self, call: Call, out: Output, task_id: str, after: int,
                     run: Run | None) -> None:
        """Write the log after ``after`` as SSE events until the task ends or is interrupted.

        ``run``: the task's run; if it ends and its end cannot be stored until an operator acts
        (a full disk), the stream ends at once with a retryable error event saying so
        (server/end_lost.py) rather than waiting with no word.

        Stops after the first terminal or interrupted status (the one :func:`tail` stops at).
        Keep-alives follow the bytes actually written: one goes out whenever this stream has
        written nothing for ``keepalive_every`` seconds, whether the log was quiet or only had
        events this stream filters out (trajectory events without the extension). Raises
        TaskNotFound if the task is evicted meanwhile; cancellation ends it at once.
        """
        dialect = call.dialect
        with_trajectory = TRAJECTORY_EXTENSION_URI in call.extensions
        cursor = after
        while True:
            # One write deadline per stretch between keep-alives (sse.py): it bounds each write,
            # and while the stream waits it is the keep-alive's time; then the block ends.
            with out.write_deadline():
                while True:
                    page = await self.store.read(task_id, cursor)
                    if page.entries:
                        end = ends_stream(page)
                        entries = page.entries if end is None else [
                            e for e in page.entries if e.position <= end]
                        if page.first_retained > cursor + 1:
                            # Events we never sent were dropped by the per-task cap: restart
                            # from the snapshot, which reflects all of them.
                            task, pos = await self.store.get(task_id)
                            await out.event(self.frames.task(dialect, task, pos),
                                            page.first_retained - 1)
                        # Every new event this reader found goes out together (few writes,
                        # not one per event: a reader that fell behind catches up in one go).
                        await out.events([
                            (self.frames.event(dialect, task_id, entry), entry.position)
                            for entry in entries
                            if with_trajectory or not isinstance(entry.event, TrajectoryEvent)])
                        if end is not None:
                            return
                        cursor = page.next
                        if page.has_more:
                            continue
                    elif page.task.status.state.terminal:
                        return  # ended before our cursor: nothing more will ever come
                    elif run is not None and (lost := lost_error(run)) is not None:
                        raise lost  # nothing more until an operator acts: say so now
                    out.rest(self.keepalive_every)
                    await self.store.wait(task_id, cursor)
            # Nothing written for keepalive_every seconds (the cursor is where it was: events
            # that arrived as the block ended are read again after the keep-alive).
            await out.keepalive()
