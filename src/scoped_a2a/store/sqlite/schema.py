"""The SQLite file: opening it, the one-process lock, the schema and its versions (no event loop).

Opening checks, in order, each failing with one :class:`StoreOpenError` line that says what to do
and changing nothing on disk: the directory exists and is writable (SQLite writes its ``-wal``
and ``-shm`` files beside the database); the file, if it exists, is an SQLite database; no other
process holds it (an exclusive ``flock`` on the file, held until :meth:`Database.close`); its
schema is one this code knows. A file of an older schema version is migrated forward in one
transaction (``MIGRATIONS``: version ``n`` is the list of statements that turn ``n - 1`` into
``n``; the first version creates everything).

Why one process: the store keeps every running task, its positions and its run leases in the
process's memory and writes them through (docs/stores.md); a second process on the same file
would see stale positions and could run a queued run twice. The lock makes that a clear refusal
at start-up instead.

Pragmas: WAL journal (readers never block the writer), ``synchronous`` FULL by default (a commit
is on disk before a send is acknowledged, so power loss loses nothing acknowledged; NORMAL
survives a killed process but may lose the last commits on power loss), incremental
auto-vacuum (space freed by retention is reused, and can be returned to the file system).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from pathlib import Path

SCHEMA_VERSION = 2
"""The version this code writes; files of a newer version are refused."""

MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, migrated_at REAL)",
        # A task: its 1.0 JSON snapshot as of position ``last``; what ListTasks filters on kept
        # apart; ``ended_at`` and ``size`` (snapshot + kept events) for retention.
        """CREATE TABLE tasks (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
            owner TEXT NOT NULL, context_id TEXT NOT NULL, state TEXT NOT NULL, ts TEXT,
            last INTEGER NOT NULL, snap BLOB NOT NULL, ended_at REAL, size INTEGER NOT NULL)""",
        "CREATE INDEX tasks_ended ON tasks (ended_at) WHERE ended_at IS NOT NULL",
        "CREATE INDEX tasks_running ON tasks (seq) WHERE ended_at IS NULL",
        "CREATE INDEX tasks_owner ON tasks (owner, seq)",
        # Each task's log: kind is one byte (s/a/t), body the event's 1.0 JSON.
        """CREATE TABLE events (
            task INTEGER NOT NULL, pos INTEGER NOT NULL, kind INTEGER NOT NULL,
            body BLOB NOT NULL, PRIMARY KEY (task, pos)) WITHOUT ROWID""",
        # Push configs, sealed (seal.py); ``cursor``/``state``/``v1``: how far its watch got.
        """CREATE TABLE push (
            task INTEGER NOT NULL, config_id TEXT NOT NULL, body BLOB NOT NULL,
            cursor INTEGER NOT NULL, state TEXT NOT NULL, v1 INTEGER NOT NULL,
            PRIMARY KEY (task, config_id)) WITHOUT ROWID""",
        # Message claims (docs/exactly-once.md): pending until its task exists; ``gone_until``
        # once its task was deleted by retention (the claim lingers for the claim window).
        """CREATE TABLE claims (
            key BLOB PRIMARY KEY, fingerprint BLOB NOT NULL, task_id TEXT NOT NULL,
            position INTEGER NOT NULL, pending_until REAL, gone_until REAL) WITHOUT ROWID""",
        "CREATE INDEX claims_task ON claims (task_id)",
        # The durable run queue: one row per detached run not yet ended; ``attempts`` counts
        # the leases taken (ctx.attempt).
        """CREATE TABLE runs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL UNIQUE,
            message BLOB NOT NULL, meta BLOB NOT NULL, why TEXT NOT NULL, owner TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0)""",
    ],
    # Version 2: the snapshot is written every few events and at the end, not at every event;
    # ``snap_pos`` is the position it reflects (the events after it are folded on loading).
    # Version 1 wrote it at every event: its snapshots are as of ``last``.
    2: [
        "ALTER TABLE tasks ADD COLUMN snap_pos INTEGER NOT NULL DEFAULT 0",
        "UPDATE tasks SET snap_pos = last",
    ],
}

SYNCHRONOUS = ("full", "normal")
FULL_BELOW = 1 << 20
"""An I/O error at open with less free space than this beside the file is a full disk (the
-wal and -shm files SQLite creates there need room)."""
_HEADER = b"SQLite format 3\x00"


class StoreOpenError(Exception):
    """The SQLite store cannot be opened; the message is one line saying what to do."""


class Database:
    """An open store file: the writer connection, the reader connection, and the lock."""

    def __init__(self, path: Path, writer: sqlite3.Connection, reader: sqlite3.Connection,
                 lock_fd: int, migrated_from: int) -> None:
        self.path = path
        self.writer = writer
        self.reader = reader
        self.migrated_from = migrated_from  # the version found (0: a new file)
        self._lock_fd = lock_fd

    def close(self) -> None:
        """Close both connections (checkpointing the WAL) and release the lock."""
        for conn in (self.reader, self.writer):
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: transactions are explicit (BEGIN IMMEDIATE in the writer). Used from one
    # thread at a time (the writer's or the reader's limiter), never two at once.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=5.0)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def open_database(path: str | Path, *, synchronous: str = "full") -> Database:
    """Open (creating if needed) the store file at ``path``; StoreOpenError with one line if
    it cannot be used. Blocking: call it from a worker thread."""
    if synchronous not in SYNCHRONOUS:
        raise StoreOpenError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}")
    path = Path(path)
    where = path.parent.resolve() if str(path.parent) else Path.cwd()
    if not where.is_dir():
        raise StoreOpenError(f"the directory {where} of the SQLite store does not exist; "
                             "create it or give another --store sqlite:PATH")
    if path.is_dir():
        raise StoreOpenError(f"{path} is a directory; --store sqlite:PATH names a file")
    if path.exists() and not path.is_file():
        # A FIFO or a device: SQLite would try it (and write a -journal beside a device).
        raise StoreOpenError(f"{path} is not a regular file (a FIFO or a device?); "
                             "--store sqlite:PATH names a file")
    if path.exists() and path.stat().st_size > 0:
        with path.open("rb") as f:
            header = f.read(len(_HEADER))
        if header != _HEADER:
            raise StoreOpenError(f"{path} is not an SQLite database; give --store sqlite: a new "
                                 "file or one this server wrote")
    if not os.access(where, os.W_OK) or _read_only_fs(where):
        raise StoreOpenError(f"the directory {where} is read-only: the SQLite store writes "
                             f"{path.name} and its -wal and -shm files there")
    try:
        lock_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StoreOpenError(f"cannot open {path}: {exc.strerror}") from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock_fd)
        raise StoreOpenError(
            f"{path} is in use by another process (a second serve on the same file?): one "
            "process per SQLite store; use --store redis://... for several") from None
    opened: list[sqlite3.Connection] = []
    try:
        writer = _connect(path)
        opened.append(writer)
        found = _prepare(writer, path, synchronous)
        reader = _connect(path)
        opened.append(reader)
        reader.execute("PRAGMA query_only = 1")
    except (StoreOpenError, sqlite3.Error) as exc:
        for conn in opened:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        os.close(lock_fd)  # after the connections: closing it drops SQLite's locks too
        if isinstance(exc, StoreOpenError):
            raise
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                exc, sqlite3.OperationalError) and "malformed" in str(exc):
            raise damaged(path, f"SQLite: {exc}") from None
        free = _free_bytes(where)
        if free is not None and free < FULL_BELOW and isinstance(exc, sqlite3.OperationalError):
            # SQLite says "disk I/O error" when it cannot create the -shm file it maps.
            raise StoreOpenError(
                f"the disk holding {where} is full ({free // 1024} KiB free; SQLite said: "
                f"{exc}): free space there, or give another --store sqlite:PATH") from None
        raise StoreOpenError(f"cannot use {path} as the SQLite store: {_why(exc)}") from None
    return Database(path, writer, reader, lock_fd, found)


def _free_bytes(where: Path) -> int | None:
    try:
        stat = os.statvfs(where)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def _read_only_fs(where: Path) -> bool:
    try:
        return bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def damaged(path: Path, detail: str) -> StoreOpenError:
    """The one line for a store file SQLite finds damaged: which file, and the two ways on."""
    first = " ".join(detail.split())[:200]
    return StoreOpenError(
        f"{path} is damaged ({first}); nothing was written to it. Salvage what SQLite can "
        f"still read into a new file (`sqlite3 {path} .recover | sqlite3 NEW.db`, or `.dump` "
        f"where .recover fails) and serve NEW.db with {path.name}.key copied to NEW.db.key, "
        f"or move {path} and its -wal and -shm files away to start with an empty store")


def _check_intact(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a damaged file before anything is written to it: ``PRAGMA quick_check`` reads
    every page once (415 MB took 0.16 s here, from the page cache) and checks the b-trees,
    which is what SQLite's "database disk image is malformed" in mid-start-up came from.
    (Damage inside a stored JSON value passes it; recovery.py refuses that as it decodes.)"""
    try:
        rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.OperationalError:
        raise  # not the file's content: an I/O error, a full disk (open_database says which)
    except sqlite3.DatabaseError as exc:
        raise damaged(path, f"SQLite: {exc}") from None
    found = [str(r[0]) for r in rows]
    if found != ["ok"]:
        lines = [line for text in found for line in text.splitlines() if "***" not in line]
        raise damaged(path, f"SQLite's quick_check: {lines[0] if lines else found[0]}")


def _why(exc: sqlite3.Error) -> str:
    text = str(exc)
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in text:
        return "it is not an SQLite database (give a new file or one this server wrote)"
    if "full" in text:
        return "the disk is full (free space, or give another --store sqlite:PATH)"
    if "readonly" in text or "read-only" in text:
        return "it is read-only (check its permissions and its directory's)"
    return text


def _prepare(conn: sqlite3.Connection, path: Path, synchronous: str) -> int:
    """Check the file is intact, set the pragmas, check the schema version and migrate
    forward; the version found."""
    if path.stat().st_size > 0:
        _check_intact(conn, path)
    # Before any table exists, so that space freed later can be handed back (incremental).
    # Only when not set already: setting it again rewrites the header (a write to a file that
    # may be about to be refused, measured: its change counter moved).
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:  # 2: INCREMENTAL
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreOpenError(f"{path}: SQLite could not switch to its WAL journal "
                             f"(got {mode!r}); is the file on a network file system?")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    found = 0
    if "schema_version" in tables:
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        found = int(row[0] or 0)
    elif tables - {"sqlite_sequence"}:
        raise StoreOpenError(f"{path} is an SQLite database of another program (it has no "
                             "scoped-a2a schema); give --store sqlite: a file of its own")
    if found > SCHEMA_VERSION:
        raise StoreOpenError(
            f"{path} was written by a newer scoped-a2a (schema version {found}; this one "
            f"reads up to {SCHEMA_VERSION}): upgrade scoped-a2a, or give another file")
    if found < SCHEMA_VERSION:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for version in range(found + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return found
