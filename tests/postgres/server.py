"""A throwaway PostgreSQL server for the tests: Debian's ``postgresql`` binaries, ``initdb`` into a
temporary directory and ``pg_ctl`` on a free loopback port.

``initdb`` and the postmaster refuse to run as root, so where the tests run as root both run as
the ``postgres`` user (``runuser``) in a directory handed to that user. The server trusts local
connections only for the superuser ``postgres`` over a socket; over TCP every user needs its
password (scram), so the tests can try bad credentials.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from ..helpers import free_port

PASSWORD = "pw-" + "t3st"
USER = "a2a"


def bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` holding ``initdb``, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def _as_postgres() -> list[str]:
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise RuntimeError("running as root without runuser: cannot start PostgreSQL")
    return [runuser, "-u", "postgres", "--"]


class PostgresServer:
    """One postmaster with its data in ``directory/data``."""

    def __init__(self, directory: Path) -> None:
        bins = bin_dir()
        assert bins is not None
        self.bins = bins
        self.directory = directory
        self.data = directory / "data"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.sockets = directory / "sock"
        self.settings: list[str] = []
        """More ``-c name=value`` settings of the postmaster."""

    def url(self, database: str = "a2a", user: str = USER, password: str = PASSWORD) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            shutil.chown(path, "postgres", "postgres")

    def _prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o755)
        self._chown(self.directory)
        self.sockets.mkdir(exist_ok=True)
        self._chown(self.sockets)

    def init(self, *initdb: str) -> None:
        """``initdb`` (with more arguments ``initdb``), start, and make the test user and
        its database."""
        self._prepare()
        subprocess.run([*_as_postgres(), str(self.bins / "initdb"), "-D", str(self.data),
                        "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256",
                        "-E", "UTF8", "--no-instructions", *initdb],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.start()
        self.psql(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        self.psql(f"CREATE DATABASE a2a OWNER {USER}")

    def start(self) -> None:
        log = self.directory / "postgres.log"
        # The postmaster directly (not pg_ctl's daemon) so a test can SIGKILL it by its pid.
        self.proc = subprocess.Popen(
            [*_as_postgres(), str(self.bins / "postgres"), "-D", str(self.data),
             "-p", str(self.port), "-h", "127.0.0.1", "-k", str(self.sockets),
             "-c", "fsync=on", "-c", "max_connections=200", "-c", "logging_collector=off",
             *(a for setting in self.settings for a in ("-c", setting))],
            stdout=subprocess.DEVNULL, stderr=open(log, "ab"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 30
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start on {self.port}:\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        done = subprocess.run([str(self.bins / "pg_isready"), "-h", "127.0.0.1", "-p",
                               str(self.port), "-q"], check=False)
        return done.returncode == 0

    def psql(self, sql: str, database: str = "postgres") -> str:
        done = subprocess.run(
            [*_as_postgres(), str(self.bins.parent / "bin" / "psql"), "-h", str(self.sockets),
             "-p", str(self.port), "-U", "postgres", "-d", database, "-XAtqc", sql],
            check=True, capture_output=True, text=True)
        return done.stdout

    def standby(self) -> PostgresServer:
        """A streaming replica of this server (``pg_basebackup -R``: it follows this one's
        WAL and is read-only until promoted), started on a port of its own; the caller
        destroys it."""
        other = PostgresServer(Path(tempfile.mkdtemp(prefix="scoped-a2a-pg-standby-")))
        other._prepare()
        done = subprocess.run(
            [*_as_postgres(), str(self.bins / "pg_basebackup"), "-D", str(other.data), "-R",
             "-X", "stream", "-c", "fast", "-h", str(self.sockets), "-p", str(self.port),
             "-U", "postgres"], check=False, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            other.destroy()
            raise RuntimeError(f"pg_basebackup failed: {done.stderr[-2000:]}")
        other.start()
        return other

    def promote(self) -> None:
        """Make this standby a primary (waits until it accepts writes)."""
        self.psql("SELECT pg_promote()")

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """SIGKILL of the postmaster; what was committed is in the WAL and survives."""
        os.kill(self.postmaster_pid(), signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def restart(self) -> None:
        """Start again after :meth:`kill` (its orphaned backends may hold the shared memory
        for a moment: a start that fails for that is tried again)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                self.start()
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # Fast shutdown, sent to the postmaster itself: self.proc is the runuser wrapper
            # when the tests run as root, and a signal to it did not always reach postgres.
            try:
                os.kill(self.postmaster_pid(), signal.SIGINT)
            except (OSError, ValueError):
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def database(self) -> str:
        """A new empty database owned by the test user; its URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        self.psql(f"CREATE DATABASE {name} OWNER {USER}")
        return self.url(name)


def skip_without_postgres() -> None:
    if bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql, or "
                    "scripts/install-system-deps)")


def new_server() -> PostgresServer:
    """A server of its own (a test that kills or stops it); the caller destroys it."""
    skip_without_postgres()
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="scoped-a2a-pg-")))
    server.init()
    return server


_shared: list[PostgresServer] = []


def shared_server() -> PostgresServer:
    """One server for this test process, started on first use and stopped at exit (tests
    that only need a database each take a fresh one: :meth:`PostgresServer.database`)."""
    if not _shared:
        server = new_server()
        atexit.register(server.destroy)
        _shared.append(server)
    return _shared[0]
