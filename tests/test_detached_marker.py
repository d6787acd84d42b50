"""The task's word on whether its current run is detached (protocol/on_disconnect.py
``detachedBy``), as events change it: a follow-up's first ``working`` sets it or, with null,
removes it, and nothing else in the task's metadata moves. The end-to-end cases (a CRM event
arriving as a follow-up, a polled step giving up on it) are in tests/test_abandon_peers.py."""

from __future__ import annotations

import pytest

from scoped_a2a.protocol.on_disconnect import DETACHED_KEY, with_marker
from scoped_a2a.protocol.types import Task, TaskState, TaskStatus, TaskStatusUpdateEvent
from scoped_a2a.runtime.run import Run
from scoped_a2a.store.snapshot import DOWNSTREAM_KEY, applied


def working(metadata: dict[str, object] | None) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id="t", context_id="c", metadata=metadata,
                                 status=TaskStatus(state=TaskState.WORKING))


def test_a_status_update_sets_and_removes_the_marker_and_keeps_the_rest() -> None:
    task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.INPUT_REQUIRED),
                metadata={"tenant": "a"})
    marked = applied(task, working({DETACHED_KEY: "rule evoai_crm_event=inactivity_action"}))
    rule = "rule evoai_crm_event=inactivity_action"
    assert marked.metadata == {"tenant": "a", DETACHED_KEY: rule}
    assert task.metadata == {"tenant": "a"}  # the earlier snapshot is left as it was
    cleared = applied(marked, working({DETACHED_KEY: None}))
    assert cleared.metadata == {"tenant": "a"}
    untouched = applied(marked, working({DOWNSTREAM_KEY: [{"taskId": "x"}]}))
    assert untouched.metadata is not None
    assert untouched.metadata[DETACHED_KEY] == "rule evoai_crm_event=inactivity_action"
    assert applied(marked, working(None)).metadata == marked.metadata


def test_with_marker_copies_and_drops_an_empty_result() -> None:
    meta = {DETACHED_KEY: "x"}
    assert with_marker(meta, None) is None
    assert meta == {DETACHED_KEY: "x"}
    assert with_marker(None, "y") == {DETACHED_KEY: "y"}


@pytest.mark.anyio
async def test_a_run_notes_a_change_once_and_only_a_change() -> None:
    run = Run("t", "c", None)
    run.say_marker(None, None)
    assert run.take_marker_note() is None
    run.say_marker("rule a=b", None)
    assert run.take_marker_note() == {DETACHED_KEY: "rule a=b"}
    assert run.take_marker_note() is None  # taken by the one event that records it
    run.say_marker(None, "rule a=b")  # a new run of a task that said otherwise: cleared
    assert run.take_marker_note() == {DETACHED_KEY: None}
