"""The SQL of writes (appends.py, core.py, grouped.py): the batch of running events, many tasks
per statement; the full path's statements (a task's end, a due snapshot, what the batch
skipped); a new task's create with its claim; and the multi-row creates and ends that
concurrent callers share (group_commit.py). Texts only: every one is prepared once per
connection (psycopg prepares a text after its fifth use, grouped.py at its first), so each is
one constant string per store.
"""

from __future__ import annotations

from ...protocol.types import TaskState
from .schema import NOW

TERMINAL = [s.value for s in TaskState if s.terminal]
TERMINAL_SQL = ", ".join(f"'{s}'" for s in TERMINAL)

BATCH = (
    "WITH i AS MATERIALIZED (SELECT * FROM json_to_recordset(%(tasks)s::json) AS x(id text, "
    "state text, ts text, token text, expect bigint, n bigint, bytes bigint, kinds int2[], "
    "offs int[], lens int[], soff int, slen int)), "
    "t AS (UPDATE tasks SET last = tasks.last + i.n, size = tasks.size + i.bytes, "
    "state = coalesce(i.state, tasks.state), "
    "ts = CASE WHEN i.state IS NULL THEN tasks.ts ELSE i.ts END, "
    "snap = CASE WHEN i.slen IS NULL THEN tasks.snap "
    "ELSE substr(%(bodies)s::bytea, i.soff, i.slen) END, "
    "snap_pos = CASE WHEN i.slen IS NULL THEN tasks.snap_pos ELSE tasks.last + i.n END "
    "FROM i WHERE tasks.id = i.id AND tasks.state NOT IN ({terminal}) "
    "AND (i.slen IS NOT NULL OR tasks.last + i.n - tasks.snap_pos < {every}) "
    "AND (i.expect IS NULL OR tasks.last + 1 = i.expect) "
    "AND (i.token IS NULL OR i.token = (SELECT token FROM runs r WHERE r.task_id = i.id)) "
    "RETURNING tasks.seq, tasks.last, tasks.id, tasks.snap_pos, i.n, i.kinds, i.offs, "
    "i.lens), "
    "e AS (INSERT INTO events SELECT t.seq, t.last - t.n + k.o, k.kind, "
    "substr(%(bodies)s::bytea, k.off, k.len) FROM t, unnest(t.kinds, t.offs, t.lens) "
    "WITH ORDINALITY AS k(kind, off, len, o)), "
    "d AS (DELETE FROM events USING t WHERE events.task = t.seq "
    "AND events.pos > t.last - t.n - {limit} AND events.pos <= t.last - {limit}) "
    "SELECT id, last, snap_pos, set_config('synchronous_commit', %(commit)s, true), "
    "pg_notify(%(channel)s, last || ' ' || id)::text FROM t "
    "UNION ALL SELECT NULL, (SELECT count(pg_notify(%(channel)s, x)) "
    "FROM unnest(%(notes)s::text[]) x), NULL, NULL, NULL "
    "WHERE cardinality(%(notes)s::text[]) > 0")
"""Every queued event in one statement, one row per task (its events at consecutive positions;
data-modifying CTEs all run; the trim deletes nothing until a log is longer than its cap).
Parameters: the tasks as one small JSON array of objects (id, state, ts, token, expect, n,
bytes, each event's kind, offset and length, and where its new snapshot is, if one is due),
parsed once by ``json_to_recordset`` (``MATERIALIZED``: the join reads typed columns, not the
JSON again); every event body and snapshot concatenated in one ``bytea`` sent in binary, which
the statement slices (``substr``; a named parameter used twice is sent once); and the
notifications of earlier synchronous commits to send (the ``UNION ALL`` branch: one row with a
NULL id, only when there are some), so they ride on the next batch instead of a statement of
their own. A task's row carrying a snapshot is written whatever its distance from the last one
(the snapshot is at its last event). The first version sent the bodies in base64 inside the
JSON and extracted each field with ``->>``, which re-parses the text at each use: 30 µs of the
backend's CPU per event for a batch of 5 tasks x 48 events, 11 µs now (6 without the events'
foreign key, schema version 3). psycopg's adaptation of Python lists to arrays costs more CPU
in this process than the whole statement, hence JSON for the small fields."""


def full_update(ends: bool, snapshot: bool) -> str:
    """The UPDATE of the full path: with the new snapshot (due, or the task's end) or not."""
    if snapshot:
        return (f"UPDATE tasks SET last = %s, state = %s, ts = %s, snap = %s, "
                f"snap_pos = last + 1, size = size + %s, "
                f"ended_at = CASE WHEN %s THEN {NOW} END, "
                f"process = CASE WHEN %s THEN NULL ELSE process END WHERE seq = %s")
    return "UPDATE tasks SET last = %s, state = %s, ts = %s, size = size + %s WHERE seq = %s"


WRITE = ("WITH t AS ({update}), e AS (INSERT INTO events VALUES (%s, %s, %s, %s)), "
         "d AS (DELETE FROM events WHERE task = %s AND pos = %s) "
         "SELECT CASE WHEN %s <> '' THEN pg_notify(%s, %s) END")
"""The full path's second statement: the task's row, the event and (unless the channel given
is empty) the notification."""

KNOWN = (
    f"WITH t AS (UPDATE tasks SET last = %s, state = %s, ts = %s, snap = %s, "
    f"snap_pos = last + 1, size = size + %s, ended_at = CASE WHEN %s THEN {NOW} END, "
    f"process = CASE WHEN %s THEN NULL ELSE process END WHERE id = %s AND last = %s "
    "AND state NOT IN ({terminal}) AND (%s::text IS NULL OR %s = (SELECT token FROM runs "
    "WHERE task_id = %s)) RETURNING seq), "
    "e AS (INSERT INTO events SELECT seq, %s, %s, %s FROM t), "
    "d AS (DELETE FROM events USING t WHERE events.task = t.seq AND events.pos = %s) "
    "SELECT set_config('synchronous_commit', %s, true), "
    "CASE WHEN %s <> '' THEN pg_notify(%s, %s) END FROM t")
"""The full path in one statement when the position is known (this process holds the snapshot
at the last one): the new snapshot, the event and the notification, only if the task is still
at that position, running, and (``fenced``) under the run's lease; no row: take the
transaction."""


CREATE_CLAIMED = (
    # The claim, made (pending_until NULL), and the task only if the claim was free: a held
    # key (ON CONFLICT waits for a concurrent insert of it to commit) stores nothing.
    "WITH c AS (INSERT INTO claims (key, fingerprint, task_id, position) "
    "VALUES (%s, %s, %s, 0) ON CONFLICT (key) DO NOTHING RETURNING 1), "
    "t AS (INSERT INTO tasks (id, owner, context_id, state, ts, last, snap, ended_at, size, "
    "process) SELECT %s, %s, %s, %s, %s, 0, %s, NULL, %s, %s FROM c) "
    "SELECT count(*) FROM c")
"""A new task with its message claim, in one statement (core.py, ``create_claimed``)."""

CREATES = (
    "WITH i AS MATERIALIZED (SELECT x.id, x.owner, x.ctx, x.state, x.ts, x.process, x.slen, "
    "substr(b.b, x.off, x.klen) AS key, substr(b.b, x.off + x.klen, x.flen) AS fp, "
    "substr(b.b, x.off + x.klen + x.flen, x.slen) AS snap "
    "FROM (SELECT %s::bytea AS b) b, json_to_recordset(%s::json) AS x(id text, owner text, "
    "ctx text, state text, ts text, process text, off int, klen int, flen int, slen int)), "
    "c AS (INSERT INTO claims (key, fingerprint, task_id, position) "
    "SELECT key, fp, id, 0 FROM i ORDER BY key ON CONFLICT (key) DO NOTHING "
    "RETURNING task_id), "
    "t AS (INSERT INTO tasks (id, owner, context_id, state, ts, last, snap, ended_at, size, "
    "process) SELECT id, owner, ctx, state, ts, 0, snap, NULL, slen, process FROM i "
    "WHERE id IN (SELECT task_id FROM c)) "
    "SELECT task_id FROM c")
""":data:`CREATE_CLAIMED` for many tasks (group_commit.py): the ids of those whose claim was
free, made and stored with their task. Parameters as :data:`BATCH`'s: every key, fingerprint
and snapshot in one ``bytea`` the statement slices, the rest one small JSON array. Claims are
inserted in key order, so two such statements (of two replicas) wait for each other's keys in
one order, never in a cycle."""

ENDS = (
    "WITH i AS MATERIALIZED (SELECT x.id, x.pos, x.state, x.ts, x.token, x.kind, x.trim, "
    "x.elen + x.slen AS size, substr(b.b, x.off, x.elen) AS body, "
    "substr(b.b, x.off + x.elen, x.slen) AS snap "
    "FROM (SELECT %s::bytea AS b) b, json_to_recordset(%s::json) AS x(id text, pos bigint, "
    "state text, ts text, token text, kind int2, trim bigint, off int, elen int, slen int)), "
    f"t AS (UPDATE tasks SET last = i.pos, state = i.state, ts = i.ts, snap = i.snap, "
    f"snap_pos = i.pos, size = tasks.size + i.size, ended_at = {NOW}, process = NULL "
    "FROM i WHERE tasks.id = i.id AND tasks.last = i.pos - 1 "
    "AND tasks.state NOT IN ({terminal}) AND (i.token IS NULL "
    "OR i.token = (SELECT token FROM runs r WHERE r.task_id = i.id)) "
    "RETURNING tasks.seq, tasks.id, i.pos, i.kind, i.body, i.trim), "
    "e AS (INSERT INTO events SELECT seq, pos, kind, body FROM t), "
    "d AS (DELETE FROM events USING t WHERE events.task = t.seq AND events.pos = t.trim) "
    "SELECT id, set_config('synchronous_commit', 'on', true) FROM t")
""":data:`KNOWN` for many tasks' ends (group_commit.py): the ids of those written (each only
if still at the position before its end, running, and under its run's lease when fenced);
the others take the transaction. No notification: an end's is sent after its commit (core.py).
Parameters as :data:`CREATES`'."""
