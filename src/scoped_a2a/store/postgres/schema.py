"""The store's schema in PostgreSQL: created on first start, migrated forward, versioned.

Everything lives in one PostgreSQL schema (``--postgres-schema``, default ``scoped_a2a``), so
several apps can share a database, each in its own. Start-up takes a transaction-level advisory
lock (per schema name) while it checks and migrates, so replicas starting together migrate
once. ``MIGRATIONS[n]`` turns version ``n - 1`` into ``n``; version 1 creates everything (it
was extended in place, before its first release, with the liveness-lease and hand-over tables
and ``tasks.process``; later changes get a version of their own). A
schema written by a newer scoped-a2a is refused with one line, and nothing is changed.

Times are the database's (``clock_timestamp()`` as epoch seconds): replicas on several
machines agree on them whatever their own clocks say.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
from psycopg import sql

SCHEMA_VERSION = 3
"""The version this code writes; a schema of a newer version is refused."""

NOW = "extract(epoch from clock_timestamp())"
"""The database's clock in epoch seconds (SQL)."""

MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE schema_version (version integer NOT NULL, "
        "migrated_at timestamptz NOT NULL DEFAULT now())",
        # A task: its 1.0 JSON snapshot as of position ``snap_pos`` (written every few events
        # and at the end; readers fold the events after it), its position ``last``; what
        # ListTasks filters on kept apart; ``ended_at`` (database clock) and ``size``
        # (snapshot + events) for retention.
        """CREATE TABLE tasks (
            seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, owner text NOT NULL,
            context_id text NOT NULL, state text NOT NULL, ts text, last bigint NOT NULL,
            snap bytea NOT NULL, ended_at double precision, size bigint NOT NULL,
            snap_pos bigint NOT NULL DEFAULT 0, process text)""",
        # ``process``: the process whose liveness lease covers the task's interactive run (set
        # by the interactive create, cleared by the terminal append: leases.py).
        "CREATE INDEX tasks_process ON tasks (process) WHERE process IS NOT NULL",
        "CREATE INDEX tasks_ended ON tasks (ended_at) WHERE ended_at IS NOT NULL",
        "CREATE INDEX tasks_owner ON tasks (owner, seq)",
        "CREATE INDEX tasks_context ON tasks (context_id, seq)",
        # Each task's log: kind is one byte (s/a/t), body the event's 1.0 JSON.
        """CREATE TABLE events (
            task bigint NOT NULL REFERENCES tasks (seq) ON DELETE CASCADE,
            pos bigint NOT NULL, kind smallint NOT NULL, body bytea NOT NULL,
            PRIMARY KEY (task, pos))""",
        # Push configs, sealed (store/sealing.py); ``cursor``/``state``/``v1``: how far its
        # watch got.
        """CREATE TABLE push (
            task bigint NOT NULL REFERENCES tasks (seq) ON DELETE CASCADE,
            config_id text NOT NULL, body bytea NOT NULL, cursor bigint NOT NULL,
            state text NOT NULL, v1 boolean NOT NULL, PRIMARY KEY (task, config_id))""",
        # Message claims (docs/exactly-once.md): pending until its task exists; ``gone_until``
        # once retention deleted its task (it lingers for the claim window).
        """CREATE TABLE claims (
            key bytea PRIMARY KEY, fingerprint bytea NOT NULL, task_id text NOT NULL,
            position bigint NOT NULL, pending_until double precision,
            gone_until double precision)""",
        "CREATE INDEX claims_task ON claims (task_id)",
        # The durable run queue: one row per detached run not yet retired. ``consumer`` and
        # ``touched``: the worker it was delivered to and when it last showed life (reclaim
        # hands it on once silent); ``token``/``lease_until``: the lease of the run now
        # executing (appends of a fenced run check it); ``attempts``: leases taken.
        """CREATE TABLE runs (
            seq bigserial PRIMARY KEY, task_id text NOT NULL UNIQUE, message bytea NOT NULL,
            meta bytea NOT NULL, why text NOT NULL, owner text NOT NULL,
            attempts integer NOT NULL DEFAULT 0, consumer text, touched double precision,
            token text, lease_until double precision)""",
        "CREATE INDEX runs_new ON runs (seq) WHERE consumer IS NULL",
        # Liveness leases (store/liveness.py, leases.py): each process's lease expiry (database
        # clock); ``reaping_until``: a lapsed process is being reaped by one process till then.
        """CREATE TABLE processes (
            id text PRIMARY KEY, expires double precision NOT NULL,
            reaping_until double precision)""",
        # Hand-over envelopes too large for a NOTIFY payload (handover.py), kept a minute.
        """CREATE TABLE handover (
            id text PRIMARY KEY, body bytea NOT NULL, expires double precision NOT NULL)""",
    ],
    2: [
        # The process whose watch delivers the config's pushes (push_watches.py): NULL while
        # being taken, '' released, '-' ended. Watches of a version-1 schema were resumed by
        # every process: they start released, so one process adopts each.
        "ALTER TABLE push ADD COLUMN owner text",
        "UPDATE push SET owner = ''",
        "CREATE INDEX push_owner ON push (owner) WHERE owner IS NOT NULL AND owner <> '-'",
    ],
    3: [
        # The events' foreign key checked every event row inserted (a query per row: a third
        # of the database's CPU per event of a stream, docs/postgres.md "Speed"). Events are
        # only inserted under their task's row lock (an UPDATE of it in the same statement or
        # transaction), so the key guarded nothing there; what it did on delete, a trigger
        # does once per statement: deleting tasks (retention, or anyone by hand) deletes
        # their events in the same transaction.
        "ALTER TABLE events DROP CONSTRAINT IF EXISTS events_task_fkey",
        "CREATE FUNCTION events_of_deleted_tasks() RETURNS trigger LANGUAGE plpgsql "
        "SET search_path FROM CURRENT AS $$ BEGIN "
        "DELETE FROM events e USING deleted d WHERE e.task = d.seq; RETURN NULL; END $$",
        "CREATE TRIGGER tasks_deleted AFTER DELETE ON tasks REFERENCING OLD TABLE AS deleted "
        "FOR EACH STATEMENT EXECUTE FUNCTION events_of_deleted_tasks()",
    ],
}


class StoreOpenError(Exception):
    """The PostgreSQL store cannot be used; the message is one line saying what to do."""


def _lock_id(schema: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"scoped-a2a:{schema}".encode(),
                                          digest_size=8).digest(), "big", signed=True)


def prepare(conn: psycopg.Connection[Any], schema: str) -> int:
    """Create or migrate ``schema`` to SCHEMA_VERSION in one transaction (under an advisory
    lock); the version found (0: new). StoreOpenError for a newer or foreign schema. Blocking."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(schema),))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))}
        found = 0
        if "schema_version" in tables:
            row = conn.execute(sql.SQL("SELECT max(version) FROM {}.schema_version").format(
                sql.Identifier(schema))).fetchone()
            found = int(row[0] or 0) if row is not None else 0
        elif tables:
            raise StoreOpenError(
                f"the PostgreSQL schema {schema!r} holds another program's tables (no "
                "scoped-a2a schema_version); give --postgres-schema a name of its own")
        if found > SCHEMA_VERSION:
            raise StoreOpenError(
                f"the PostgreSQL schema {schema!r} was written by a newer scoped-a2a (schema "
                f"version {found}; this one reads up to {SCHEMA_VERSION}): upgrade "
                "scoped-a2a, or give another --postgres-schema")
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement.encode())
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    return found
