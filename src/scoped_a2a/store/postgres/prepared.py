"""Statements the store runs through libpq's own prepared-statement calls, without psycopg's
cursor (connection.py, ``Conn.prepared``): what one is, and its parameters' text form.

Used for the statements every send runs (a new task's create with its claim, a task's end:
core.py); the rest keep psycopg's cursor path, which adapts any Python value. No I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.pq import ExecStatus

OIDS = {"bool": 16, "bytea": 17, "int8": 20, "int2": 21, "text": 25, "float8": 701}
FAILED = (ExecStatus.FATAL_ERROR, ExecStatus.PIPELINE_ABORTED, ExecStatus.BAD_RESPONSE)


class Prepared:
    """One hot statement run through libpq's own calls (:meth:`.connection.Conn.prepared`),
    without a cursor: prepared on each connection at its first use, with its parameters'
    types said (``types``: ``bytea`` goes in binary, the rest in text), its rows read in
    text. What this saves over :meth:`.connection.Conn.execute` (a cursor, the query's
    conversion, each parameter's adaptation, psycopg's prepared-statement bookkeeping, the
    rows' loaders): 100-125k instructions per statement (callgrind, docs/postgres.md). A
    statement's text must hold no ``%`` but its ``%s`` placeholders."""

    __slots__ = ("formats", "name", "oids", "sql")

    def __init__(self, name: str, query: str, types: Sequence[str]) -> None:
        parts = query.split("%s")
        if len(parts) != len(types) + 1:
            raise ValueError(f"{name}: {len(parts) - 1} placeholders, {len(types)} types")
        self.name = f"scoped_a2a_{name}".encode()
        self.sql = "".join(p + (f"${i}" if i < len(parts) else "")
                           for i, p in enumerate(parts, start=1)).encode()
        self.oids = [OIDS[t] for t in types]
        self.formats = [1 if t == "bytea" else 0 for t in types]


def param(value: Any) -> bytes | None:
    """A parameter in PostgreSQL's text form (bytes as they are: bytea goes in binary)."""
    if value is None or isinstance(value, bytes):
        return value
    if value is True or value is False:
        return b"t" if value else b"f"
    return str(value).encode()
