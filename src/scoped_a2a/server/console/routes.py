"""The console's routes: the page, its files, and the JSON + SSE API under ``/console/api``.

``A2AApp`` hands every request whose path starts with ``/console`` here, before its own
authentication (the console has its own: a session cookie or the request's credential, see
:mod:`.access`). docs/console.md documents the API.

Cancellation: a hang-up on a stream is seen by a disconnect watcher (the one reader of
``receive()``), which cancels the stream's task group; JSON answers are short and need none.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any
from urllib.parse import parse_qs

import anyio
import msgspec

from ...protocol.errors import (
    A2AError,
    PermissionDenied,
    ServerUnavailable,
    TaskNotCancelable,
    TaskNotFound,
    Unauthenticated,
)
from ...protocol.principal import ANONYMOUS
from ...runtime.runner import Runner
from ...store.base import TaskStore
from ..asgi import Receive, Scope, Send, send_response
from ..auth import Authenticate
from ..body import BodyBudget, BodyRefused, BodyTooLarge, ClientGone, discard_body, read_body
from ..disconnect import DisconnectWatcher
from .access import COOKIE, Access, ConsoleSettings, Viewer, cookie, session_cookie
from .http import SECURITY_HEADERS, EventStream, StaticFiles, send_error, send_file, send_json
from .hub import RunHub, RunView
from .timeline import stream_timeline

log = logging.getLogger("scoped_a2a.console")

COALESCE = 0.15
"""The least time between two snapshots of a runs stream: a burst of changes (64 runs starting
at once) makes one snapshot, and a change still shows well within 1 s (a change after a quiet
spell goes out at once)."""

KEEPALIVE = 15.0
RECHECK = 10.0
"""Seconds between re-checks of a stream's credential (a revoked key ends the stream); a
logout ends the session's streams at once."""

MAX_LIVE = 500
"""Runs in flight listed in one snapshot (``liveTotal`` says how many there are)."""

MAX_FEEDS = 16
"""Live feeds (runs streams and timelines) one principal may have open at once (a page holds
two); more are refused with 429, so one credential cannot tie up the server with thousands."""

FILTERS = ("reason", "owner", "state", "context")


class Console:
    """The console of one app: ``await console(scope, receive, send, path)``.

    It becomes ``runner``'s watch (from then on every run started is followed), reads tasks
    from ``store``, and checks credentials with the app's ``authenticate``.
    """

    def __init__(self, settings: ConsoleSettings, *, runner: Runner, store: TaskStore,
                 authenticate: Authenticate | None, public_url: str | None,
                 write_timeout: float, bodies: BodyBudget | None = None) -> None:
        self.runner, self.store, self.write_timeout = runner, store, write_timeout
        self.bodies = bodies
        self.hub = RunHub()
        runner.watch = self.hub
        self.access = Access(authenticate, settings, public_url)
        self.static = StaticFiles()
        self._feeds: dict[str, int] = {}  # principal id -> its open feeds

    async def __call__(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        method = scope.get("method", "GET")
        try:
            try:
                self.access.check_host(scope)
            except PermissionDenied:
                await discard_body(scope, receive)
                raise
            if method == "POST" and path == "/console/api/login":
                await self._login(scope, receive, send)
                return
            await discard_body(scope, receive)
            if method not in ("GET", "HEAD", "POST"):
                await send_error(send, 405, "the console answers GET (reads) and POST (writes)")
            elif path == "/console":
                await self._page(scope, send)
            elif path == "/console/":
                await send_response(send, 308, b"", headers=[
                    (b"location", b"../console"), *SECURITY_HEADERS])
            elif path.startswith("/console/static/"):
                found = self.static.get(path[len("/console/static/"):])
                if found is None:
                    await send_error(send, 404, "no such console file")
                else:
                    await send_file(send, 200, *found)
            elif path.startswith("/console/api/"):
                await self._api(scope, receive, send, path[len("/console/api/"):], method)
            else:
                await send_error(send, 404, "no such console page; open /console")
        except (Unauthenticated, PermissionDenied) as exc:
            await send_error(send, exc.status, exc.message)
        except ServerUnavailable as exc:
            await send_error(send, 503, exc.message)

    # --- the page ---------------------------------------------------------------------------

    async def _page(self, scope: Scope, send: Send) -> None:
        """The console page; with authentication on and no credential, 401 and the login form
        (which holds no data)."""
        try:
            await self.access.viewer(scope)
        except (Unauthenticated, PermissionDenied):
            body, ctype = self.static.get("login.html") or (b"", b"text/html")
            await send_file(send, 401, body, ctype)
            return
        body, ctype = self.static.get("index.html") or (b"", b"text/html")
        await send_file(send, 200, body, ctype)

    # --- sessions ---------------------------------------------------------------------------

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self.access.check_write(scope)
        except PermissionDenied:
            await discard_body(scope, receive)
            raise
        try:
            body = await read_body(scope, receive, 32 << 10, budget=self.bodies,
                                   unauthenticated=True)  # a login: nobody known yet
        except BodyRefused as exc:
            await send_error(send, exc.http_status, "a login body is a small JSON object"
                             if isinstance(exc, BodyTooLarge) else str(exc), exc.http_headers())
            return
        except ClientGone:
            return
        try:
            credential = msgspec.json.decode(body, type=dict[str, str])["credential"]
        except (msgspec.DecodeError, msgspec.ValidationError, KeyError):
            await send_error(send, 400, 'send {"credential": "YOUR API KEY OR JWT"}')
            return
        if not self.access.auth_on:
            await send_json(send, 200, self._me(Viewer(ANONYMOUS, True)))
            return
        principal = await self.access.check(scope, credential)  # raises 401 / 403
        token = self.access.sessions.create(credential, principal.id)
        viewer = Viewer(principal, self.access._operator(principal), token)
        log.info("console login: %s%s", viewer.name, " (operator)" if viewer.operator else "")
        set_cookie = session_cookie(scope, token, seconds=self.access.sessions.seconds,
                                    https=self.access.https)
        await send_json(send, 200, self._me(viewer), [(b"set-cookie", set_cookie)])

    def _me(self, viewer: Viewer) -> dict[str, Any]:
        return {"principal": viewer.principal.id, "operator": viewer.operator,
                "authentication": self.access.auth_on}

    # --- the API ----------------------------------------------------------------------------

    async def _api(self, scope: Scope, receive: Receive, send: Send, route: str,
                   method: str) -> None:
        if route == "logout" and method == "POST":
            # No credential needed: ending a session (even one whose key was revoked) and
            # clearing the browser's cookie reveal nothing; the cross-site check still applies.
            self.access.check_write(scope)
            token = cookie(scope, COOKIE)
            if token is not None:
                self.access.sessions.drop(token)  # its open feeds end at once
            await send_json(send, 200, {"loggedOut": True},
                            [(b"set-cookie", session_cookie(scope, "", seconds=0,
                                                           https=self.access.https))])
            return
        viewer = await self.access.viewer(scope)
        if method == "POST":
            self.access.check_write(scope)
        parts = route.split("/")
        if route == "me" and method != "POST":
            await send_json(send, 200, self._me(viewer))
        elif route == "runs" and method != "POST":
            query = _query(scope)
            try:
                limit = min(max(int(query.get("limit", "100")), 1), 1000)
            except ValueError:
                await send_error(send, 400, "limit must be a whole number from 1 to 1000")
                return
            filters = {k: query[k] for k in FILTERS if query.get(k)}
            await send_json(send, 200, self.snapshot(viewer, 0, filters, limit))
        elif route == "runs/stream" and method != "POST":
            await self._streaming(scope, receive, send, viewer, self._runs_stream, viewer)
        elif len(parts) in (2, 3) and parts[0] == "tasks":
            task_id = parts[1]  # ASGI paths arrive percent-decoded
            action = parts[2] if len(parts) == 3 else ""
            await self._task(scope, receive, send, viewer, task_id, action, method)
        else:
            await send_error(send, 404, f"no such console API route {route!r} for {method}")

    def snapshot(self, viewer: Viewer, since_seq: int, filters: dict[str, str],
                 limit: int) -> dict[str, Any]:
        """Runs in flight, ended runs after ``since_seq`` (newest first, at most ``limit``,
        matching ``filters``) and ends per reason, as ``viewer`` may see them."""
        hub, now = self.hub, time.time()
        live = [view.to_json(now, run) for run, view in hub.live.values()
                if viewer.sees(view.owner)]
        ended: list[dict[str, Any]] = []
        for view in reversed(hub.ended_runs.values()):
            if view.seq <= since_seq or len(ended) >= limit:
                break
            if viewer.sees(view.owner) and _matches(view, filters):
                ended.append(view.to_json(now))
        return {"now": round(now * 1000), "endedSeq": hub.ended_seq,
                "liveTotal": len(live), "live": live[:MAX_LIVE], "ended": ended,
                "counts": hub.reason_counts(viewer.sees, now)}

    async def _runs_stream(self, scope: Scope, out: EventStream, viewer: Viewer) -> None:
        hub, sent_seq = self.hub, 0
        while True:
            version = hub.version
            data = self.snapshot(viewer, sent_seq, {}, 200 if sent_seq == 0 else 1000)
            sent_seq = data["endedSeq"]
            await out.event("snapshot", data)
            sent_at = anyio.current_time()
            if hub.closed and not hub.live:  # shutting down, and every run has ended
                await out.event("shutdown", {"error": "the server is shutting down"})
                return
            while True:
                with anyio.move_on_after(KEEPALIVE) as idle:
                    await hub.wait_changed(version)
                if not idle.cancelled_caught:
                    break
                await out.keepalive()
            await anyio.sleep(max(sent_at + COALESCE - anyio.current_time(), 0.0))

    async def _streaming(self, scope: Scope, receive: Receive, send: Send, viewer: Viewer,
                         body: Any, *args: Any) -> None:
        """Run ``body(scope, out, *args)`` as an SSE response until it returns, the client
        hangs up (the watcher cancels the group), or ``viewer``'s credential stops being valid
        (then a ``logout`` event ends it); then end the response. A principal with
        MAX_FEEDS open feeds gets 429 instead."""
        who = viewer.principal.id
        if self._feeds.get(who, 0) >= MAX_FEEDS:
            await send_error(send, 429, f"too many open console feeds for this principal "
                             f"(at most {MAX_FEEDS}): close other console pages or streams")
            return
        self._feeds[who] = self._feeds.get(who, 0) + 1
        try:
            await self._stream(scope, receive, send, viewer, body, *args)
        finally:
            if self._feeds[who] <= 1:
                del self._feeds[who]
            else:
                self._feeds[who] -= 1

    async def _stream(self, scope: Scope, receive: Receive, send: Send, viewer: Viewer,
                      body: Any, *args: Any) -> None:
        out = EventStream(send, write_timeout=self.write_timeout)
        refused = stalled = False
        async with anyio.create_task_group() as tg:
            watcher = DisconnectWatcher(receive, tg.cancel_scope)
            tg.start_soon(watcher.run)
            feed = anyio.CancelScope()

            async def guard() -> None:
                nonlocal refused
                await self._until_refused(scope, viewer)
                refused = True
                feed.cancel()

            tg.start_soon(guard)
            try:
                with feed:
                    await body(scope, out, *args)
                if refused:
                    await out.event("logout", {"error": "the console session ended"})
            except TimeoutError:
                stalled = True  # the client stopped reading: nothing more can reach it
            except TaskNotFound:
                pass
            finally:
                watcher.stop()
                tg.cancel_scope.cancel()  # the guard
        if not stalled:
            await out.close()

    async def _until_refused(self, scope: Scope, viewer: Viewer) -> None:
        """Return once ``viewer``'s credential stops being valid: at once when its session
        ends (logout, or refused by another request), else at the first re-check (every
        RECHECK seconds) the authenticator refuses. Never without authentication. An
        authenticator that is down (ServerUnavailable) is not a refusal."""
        if not self.access.auth_on:
            await anyio.sleep_forever()
        while True:
            with anyio.move_on_after(RECHECK):
                if viewer.session is None:
                    await anyio.sleep_forever()
                else:
                    await self.access.sessions.wait_ended(viewer.session)
            try:
                viewer = await self.access.viewer(scope)
            except (Unauthenticated, PermissionDenied):
                return
            except ServerUnavailable:  # try again at the next re-check, not in a tight loop
                if viewer.session is not None and viewer.session not in self.access.sessions:
                    viewer = dataclasses.replace(viewer, session=None)

    async def _task(self, scope: Scope, receive: Receive, send: Send, viewer: Viewer,
                    task_id: str, action: str, method: str) -> None:
        store = self.store
        found = self.hub.view(task_id)
        try:
            owner = found[1].owner if found is not None else await store.owner_of(task_id)
            if not viewer.sees(owner):
                raise TaskNotFound(f"task {task_id!r} not found")
            if action == "" and method != "POST":
                task, _ = await store.get(task_id)
                view = found[1].to_json(time.time(), found[0]) if found is not None else None
                await send_json(send, 200, {"taskId": task_id, "contextId": task.context_id,
                                            "state": task.status.state.value, "run": view})
            elif action == "timeline" and method != "POST":
                await self._streaming(scope, receive, send, viewer, self._timeline, task_id)
            elif action == "cancel" and method == "POST":
                log.info("console: %s cancels task %s", viewer.name, task_id)
                task = await self.runner.cancel_task(task_id, by=viewer.name)
                await send_json(send, 200, {"taskId": task_id,
                                            "state": task.status.state.value})
            else:
                await send_error(send, 404, f"no such task route {action!r} for {method}")
        except TaskNotFound:
            await send_error(send, 404, f"task {task_id!r} not found")
        except TaskNotCancelable as exc:
            await send_error(send, 409, exc.message)
        except A2AError as exc:
            await send_error(send, 400, exc.message)

    async def _timeline(self, scope: Scope, out: EventStream, task_id: str) -> None:
        await stream_timeline(out, self.store, self.hub, task_id)


def _matches(view: RunView, filters: dict[str, str]) -> bool:
    if not filters:
        return True
    principal = view.owner.partition("\x1f")[0]
    checks = {"reason": view.reason, "owner": principal, "state": view.state,
              "context": view.context_id}
    return all(checks[k] == v for k, v in filters.items())


def _query(scope: Scope) -> dict[str, str]:
    raw = bytes(scope.get("query_string", b"")).decode("latin-1")
    return {k: v[0] for k, v in parse_qs(raw).items() if v}
