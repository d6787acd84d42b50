"""``folded``: a batch of events folded into a snapshot at once equals folding them one by one
(``applied``), and leaves the snapshot it started from, which readers may hold, unchanged."""

from __future__ import annotations

import msgspec

from scoped_a2a.protocol.types import Artifact, Part, TaskArtifactUpdateEvent, TaskState
from scoped_a2a.store.snapshot import applied, folded

from .redis.test_redis_store import chunk, new_task, status, tick


def _other(task_id: str, context_id: str, text: str, *, append: bool
           ) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, append=append,
                                   artifact=Artifact(artifact_id="a2", parts=[Part(text=text)]))


def test_a_batch_folded_at_once_equals_one_by_one_and_leaves_the_held_snapshot_alone() -> None:
    task = new_task()
    start = [status(task, TaskState.WORKING, "w"), chunk(task, "0", append=False),
             chunk(task, " 1", append=True)]
    held = task
    for event in start:
        held = applied(held, event)
    before = msgspec.json.encode(held)
    # Appends to a held artifact, a replacement of it, a new artifact, statuses with and
    # without messages, trajectory events: every branch of apply_event, mixed.
    batch = [chunk(task, " 2", append=True), tick(task, 1), chunk(task, " 3", append=True),
             status(task, TaskState.WORKING, "again"), _other(task.id, "ctx", "x", append=False),
             _other(task.id, "ctx", "y", append=True), chunk(task, "new", append=False),
             chunk(task, " 4", append=True), status(task, TaskState.WORKING),
             tick(task, 2)]
    one_by_one = held
    for event in batch:
        one_by_one = applied(one_by_one, event)
    at_once = folded(held, batch)
    assert msgspec.json.encode(at_once) == msgspec.json.encode(one_by_one)
    assert msgspec.json.encode(held) == before, "the held snapshot changed"
    # Folding more into the result leaves the first result's readers alone too.
    mid = msgspec.json.encode(at_once)
    again = folded(at_once, [chunk(task, " 5", append=True),
                             status(task, TaskState.WORKING, "z")])
    assert msgspec.json.encode(at_once) == mid
    assert again.artifacts is not None and again.artifacts[0].parts[-1].text == " 5"
    assert msgspec.json.encode(held) == before
