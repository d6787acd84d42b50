"""The synchronous writes core.py groups (group_commit.py): a new task's create with its message
claim, and a task's end when this process holds its snapshot (the one-statement form of the
full path). Each is an :class:`~.group_commit.Item` kind with its single statement (``one``,
as before grouping: prepared, no cursor) and its multi-row one (``many``: append_sql.CREATES,
append_sql.ENDS), whose parameters take the batch writer's shape (batch_items.py: one small
JSON array, every byte string in one ``bytea``). No state; errors are psycopg's, raised to the
group writer (which answers each caller: group_commit.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .append_sql import CREATE_CLAIMED, CREATES, ENDS, KNOWN, TERMINAL_SQL
from .batch_items import Bodies
from .connection import Conn
from .group_commit import Item
from .prepared import Prepared

_encode = msgspec.json.Encoder().encode

_CREATE_CLAIMED = Prepared("create_claimed", CREATE_CLAIMED, [
    "bytea", "bytea", "text", "text", "text", "text", "text", "text", "bytea", "int8", "text"])
_CREATES = Prepared("creates", CREATES, ["bytea", "text"])
_KNOWN = Prepared("known", KNOWN.format(terminal=TERMINAL_SQL), [
    "int8", "text", "text", "bytea", "int8", "bool", "bool", "text", "int8", "text", "text",
    "text", "int8", "int2", "bytea", "int8", "text", "text", "text", "text"])
"""append_sql.KNOWN, run per task's end (a send's last statement) and per due snapshot."""
_ENDS = Prepared("ends", ENDS.format(terminal=TERMINAL_SQL), ["bytea", "text"])


class Create(Item):
    """A new task (its row's fields, ``snap`` its JSON) with its message claim (``key``,
    ``fp``)."""

    __slots__ = ("ctx", "fp", "id", "key", "owner", "process", "snap", "state", "ts")

    def __init__(self, key: bytes, fp: bytes, task_id: str, owner: str, ctx: str, state: str,
                 ts: str | None, snap: bytes, process: str) -> None:
        super().__init__((key, task_id))
        self.key, self.fp, self.id, self.owner, self.ctx = key, fp, task_id, owner, ctx
        self.state, self.ts, self.snap, self.process = state, ts, snap, process


class _CreateRow(msgspec.Struct):
    id: str
    owner: str
    ctx: str
    state: str
    ts: str | None
    process: str
    off: int
    klen: int
    flen: int
    slen: int


async def create_one(conn: Conn, c: Create) -> bool:
    """Claimed and stored (True), or the key is held (False)."""
    rows = await conn.prepared(_CREATE_CLAIMED, (
        c.key, c.fp, c.id, c.id, c.owner, c.ctx, c.state, c.ts, c.snap, len(c.snap),
        c.process))
    return rows[0][0] == b"1"


async def create_many(conn: Conn, items: list[Create]) -> list[bool]:
    bodies = Bodies()
    rows = [_CreateRow(c.id, c.owner, c.ctx, c.state, c.ts, c.process,
                       bodies.add(c.key, c.fp, c.snap), len(c.key), len(c.fp), len(c.snap))
            for c in items]
    got = await conn.prepared(_CREATES, (bodies.joined(), _encode(rows).decode()))
    claimed = {r[0] for r in got}
    return [c.id.encode() in claimed for c in items]


class End(Item):
    """A task's end at ``pos`` (the task at ``pos - 1`` here): the event (``kind``, ``body``)
    and the ended snapshot (``snap``); ``trim``: the event its log's cap drops."""

    __slots__ = ("body", "id", "kind", "pos", "snap", "state", "token", "trim", "ts")

    def __init__(self, task_id: str, pos: int, state: str, ts: str | None, snap: bytes,
                 body: bytes, kind: int, token: str | None, trim: int) -> None:
        super().__init__((task_id,))
        self.id, self.pos, self.state, self.ts, self.snap = task_id, pos, state, ts, snap
        self.body, self.kind, self.token, self.trim = body, kind, token, trim


class _EndRow(msgspec.Struct):
    id: str
    pos: int
    state: str
    ts: str | None
    token: str | None
    kind: int
    trim: int
    off: int
    elen: int
    slen: int


def known_args(task_id: str, pos: int, state: str, ts: str | None, snap: bytes, body: bytes,
               kind: int, token: str | None, trim: int, ends: bool, lazy: bool,
               channel: str) -> tuple[Any, ...]:
    """append_sql.KNOWN's parameters: the event at ``pos`` with the snapshot after it (a lazy
    commit notifies in its statement; a synchronous one after it: core.py)."""
    return (pos, state, ts, snap, len(body) + len(snap), ends, ends, task_id, pos - 1, token,
            token, task_id, pos, kind, body, trim, "off" if lazy else "on",
            channel if lazy else "", channel, f"{pos} {task_id}")


async def known(conn: Conn, args: tuple[Any, ...]) -> bool:
    """append_sql.KNOWN with ``args`` (:func:`known_args`): written, or not (no row)."""
    return bool(await conn.prepared(_KNOWN, args))


async def end_one(conn: Conn, e: End) -> bool:
    return await known(conn, known_args(e.id, e.pos, e.state, e.ts, e.snap, e.body, e.kind,
                                        e.token, e.trim, True, False, ""))


async def end_many(conn: Conn, items: list[End]) -> list[bool]:
    bodies = Bodies()
    rows = [_EndRow(e.id, e.pos, e.state, e.ts, e.token, e.kind, e.trim,
                    bodies.add(e.body, e.snap), len(e.body), len(e.snap)) for e in items]
    got = await conn.prepared(_ENDS, (bodies.joined(), _encode(rows).decode()))
    written = {r[0] for r in got}
    return [e.id.encode() in written for e in items]
