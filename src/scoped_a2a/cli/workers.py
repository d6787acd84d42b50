"""``serve --workers N``: N server processes on one port, over a shared store.

Why ``SO_REUSEPORT`` and not hypercorn's own workers: ``serve`` runs hypercorn inside its own
lifecycle (its signal handlers, the app's drain with ``--grace``, the store opened around the
app, the guards against hypercorn hanging in shutdown: ``server/serve.py``), while hypercorn's
``workers`` setting exists only in its ``hypercorn.run`` entry point, which owns signals and
shutdown itself. So each worker is a whole ``python -m scoped_a2a serve`` process with the same
options, listening on the same port with ``SO_REUSEPORT``: the kernel spreads new connections
over the workers by a hash of each connection's addresses, and each worker starts, drains and
records exactly as a single ``serve`` does.

This process, the supervisor, holds the port (bound with ``SO_REUSEPORT``, not listening, so
``--port 0`` is resolved once and no other program takes the port while a worker restarts),
starts the workers, and passes SIGINT and SIGTERM on to each of them (a second signal too: the
workers then stop at once). It exits once they all have: 0, or the first non-zero status. A
worker that exits without a signal (killed, out of memory) is started again; its interactive
runs are recorded lost by the other workers once its lease lapses (``store/liveness.py``), its
queued runs are taken over by another worker. One that keeps dying at start
(:data:`MAX_QUICK_EXITS` times in a row within :data:`QUICK_EXIT` seconds of its start) stops
the supervisor and every worker with exit status 1.

Only a store that every process shares can be served so: the memory store lives in one
process, and an SQLite file is served by one process (it keeps the running tasks' positions in
that process's memory, and a second ``serve`` on the file is refused); either is refused with
one line (:func:`check_workers`).

``--metrics``: the workers share one directory for their metrics (prometheus_client's
multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``, made here unless it is set already), so a
scrape reaching any worker answers for all of them (observe/metrics.py); the supervisor marks
each worker that exits dead in it (its live gauges go, its counts stay) and removes the
directory it made at the end.

Per-process, and documented so (docs/redis.md): per-caller limits, the request body budget and
the console (a console session shows the runs of the worker it reached).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import FrameType

from .interrupt import ctrl_c_seen

log = logging.getLogger("scoped_a2a.cli")

QUICK_EXIT = 10.0
"""Seconds after its start within which a worker's exit counts as a failure to start."""

EXIT_USAGE = 2
"""A worker's exit status for a start-up error (a port in use, Redis out of reach)."""

MAX_QUICK_EXITS = 5
"""Quick exits in a row after which the supervisor gives up."""


def check_workers(args: argparse.Namespace) -> None:
    """SystemExit with one line when ``--workers`` > 1 cannot be served with ``--store``."""
    if args.workers <= 1:
        return
    if args.store == "memory":
        raise SystemExit(
            f"--workers {args.workers} needs a store the processes share: the memory store "
            "lives in one process; use --store redis://HOST:PORT/DB or postgresql://...")
    if args.store.startswith("sqlite:"):
        raise SystemExit(
            f"--workers {args.workers}: an SQLite store is served by one process per file (it "
            "keeps the running tasks in that process's memory); use --store redis://... or "
            "postgresql://... for several processes")


def _worker_argv(argv: list[str], port: int) -> list[str]:
    """``argv`` of the supervisor's ``serve`` without ``--workers``, on ``port``, with the
    port shared (later options win in argparse, so the port is simply appended)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--workers":
            skip = True
            continue
        if arg.startswith("--workers="):
            continue
        out.append(arg)
    return [*out, "--port", str(port), "--reuse-port"]


def _die_with_parent() -> None:
    """In the worker, before it runs: SIGTERM when the supervisor dies, however (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    """``N`` workers of one ``serve`` command line; :meth:`run` until they have all exited."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workers: list[subprocess.Popen[bytes] | None] = [None] * args.workers
        self.started: list[float] = [0.0] * args.workers
        self.quick_exits = [0] * args.workers
        self.signals = 0
        self.status = 0
        self.env = dict(os.environ)
        self.metrics_dir: str | None = None
        """The directory the workers share their metrics in (``--metrics``), if made here."""
        if getattr(args, "metrics", False) and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            self.metrics_dir = tempfile.mkdtemp(prefix="scoped-a2a-metrics-")
            self.env["PROMETHEUS_MULTIPROC_DIR"] = self.metrics_dir

    def _start(self, i: int, argv: list[str]) -> None:
        # A session of its own: a signal to the supervisor's process group (Ctrl-C in a
        # terminal, ``timeout``, some process managers) reaches the workers once, through the
        # supervisor; twice would be the "second signal" that stops them at once.
        proc = subprocess.Popen([sys.executable, "-m", "scoped_a2a", *argv],
                                start_new_session=True, preexec_fn=_die_with_parent,
                                env=self.env)
        self.workers[i] = proc
        self.started[i] = time.monotonic()
        log.info("worker %d started (pid %d)", i + 1, proc.pid)

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        log.info("%s: passing it on to %d worker(s)", signal.Signals(signum).name,
                 sum(p is not None and p.poll() is None for p in self.workers))
        for proc in self.workers:
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)

    def run(self) -> int:
        """Start the workers and supervise them; the exit status (see the module)."""
        family = socket.AF_INET6 if ":" in self.args.host else socket.AF_INET
        holder = socket.socket(family, socket.SOCK_STREAM)
        try:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                holder.bind((self.args.host, self.args.port))
            except OSError as exc:
                raise SystemExit(f"cannot listen on {self.args.host}:{self.args.port}: "
                                 f"{exc.strerror or exc}") from None
            port = holder.getsockname()[1]
            argv = _worker_argv(self.args.argv, port)
            previous = {s: signal.signal(s, self._signalled)
                        for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                if ctrl_c_seen():  # before these handlers, and Python dropped it: no workers
                    raise KeyboardInterrupt
                # Not "serving": no worker listens yet (a connection now is refused); each
                # says "serving on" once it answers.
                log.info("serve --workers %d: starting them on port %d (SO_REUSEPORT)",
                         self.args.workers, port)
                for i in range(self.args.workers):
                    self._start(i, argv)
                return self._supervise(argv)
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
        finally:
            holder.close()
            if self.metrics_dir is not None:
                shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _exited(self, pid: int) -> None:
        """A worker exited: its live gauges leave the shared metrics (its counts stay)."""
        directory = self.env.get("PROMETHEUS_MULTIPROC_DIR")
        if directory and getattr(self.args, "metrics", False):
            with contextlib.suppress(ImportError, OSError):
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]

    def _supervise(self, argv: list[str]) -> int:
        while True:
            alive = 0
            for i, proc in enumerate(self.workers):
                if proc is None:
                    continue
                code = proc.poll()
                if code is None:
                    alive += 1
                    continue
                self.workers[i] = None
                self._exited(proc.pid)
                if self.signals:
                    # A worker still starting when the signal came dies of it before its
                    # handlers are in place: that is the stop we asked for, not a failure.
                    if code in (-signal.SIGTERM, -signal.SIGINT):
                        code = 0
                    if code and not self.status:
                        self.status = code
                    continue
                if code == EXIT_USAGE:  # a start-up error (one line): it would only repeat
                    log.error("worker %d could not start; stopping every worker", i + 1)
                    self.status = code
                    self._signalled(signal.SIGTERM, None)
                    continue
                lived = time.monotonic() - self.started[i]
                self.quick_exits[i] = self.quick_exits[i] + 1 if lived < QUICK_EXIT else 0
                if self.quick_exits[i] >= MAX_QUICK_EXITS:
                    log.error("worker %d exited %d times within %.0f s of its start (status "
                              "%s); stopping every worker", i + 1, self.quick_exits[i],
                              QUICK_EXIT, code)
                    self.status = 1
                    self._signalled(signal.SIGTERM, None)
                    continue
                log.warning("worker %d (pid %d) exited with status %s; starting it again",
                            i + 1, proc.pid, code)
                self._start(i, argv)
                alive += 1
            if alive == 0:
                return self.status
            time.sleep(0.1)


def run_workers(args: argparse.Namespace) -> int:
    """``serve --workers N`` (N > 1, a shared store: :func:`check_workers` passed)."""
    return Supervisor(args).run()
