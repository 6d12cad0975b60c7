"""ASGI middleware: byte caps on request bodies, per route, enforced while they stream (413).

The one place bodies are capped: uploads (`/v1/models`, `/v1/check`) and V2 inference bodies
alike. The cap is checked when the app first reads the body, not when the request arrives, so
whatever the route checks before reading (the key, the rate, the model) answers first, as if
the route read the body itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import PayloadTooLarge
from server.http import request_state
from server.http.errors import error_response, status_of
from server.http.paths import RouteTable


class BodyTooLarge(Exception):
    """Raised inside the app's receive() when the body crosses the cap."""


class BodyLimit:
    """Caps the bodies of requests to each route table (server/http/paths.py) at its byte count.

    Content-Length above the cap is refused before reading; the bytes are counted as well,
    since Content-Length can lie or be absent (chunked). Once crossed, whatever the app
    would answer is replaced by the 413.
    """

    def __init__(self, app: ASGIApp, caps: Iterable[tuple[RouteTable, int]]) -> None:
        self.app = app
        self.caps = tuple(caps)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cap = self._cap(scope) if scope["type"] == "http" else None
        if cap is None:
            await self.app(scope, receive, send)
            return
        await self._guarded(scope, receive, send, cap)

    def _cap(self, scope: Scope) -> int | None:
        path = scope["path"]
        for paths, cap in self.caps:
            if path in paths:
                return cap
        return None

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, cap: int) -> None:
        guard = BodyGuard(scope, receive, send, cap)
        try:
            await self.app(scope, guard.receive, guard.send)
        except Exception:
            if not guard.crossed:
                raise
        if guard.crossed and not guard.started:
            await guard.refuse()


class BodyGuard:
    """One request's cap: the app reads through `receive`, which counts the body's bytes and
    raises BodyTooLarge once they cross `cap`, and answers through `send`, which drops the
    app's answer once the cap is crossed (`refuse` answers the 413 instead). `status` is the
    status answered so far, None before an answer starts (the metrics label)."""

    __slots__ = ("_receive", "_send", "cap", "crossed", "scope", "seen", "status")

    def __init__(self, scope: Scope, receive: Receive, send: Send, cap: int) -> None:
        self.scope = scope
        self.cap = cap
        self.seen = 0
        self.crossed = False
        self.status: int | None = None
        self._receive = receive
        self._send = send

    @property
    def started(self) -> bool:
        return self.status is not None

    async def receive(self) -> Message:
        if self.seen == 0 and _declared(self.scope) > self.cap:
            self.crossed = True
            raise BodyTooLarge
        message = await self._receive()
        if message["type"] == "http.request":
            self.seen += len(message.get("body", b""))
            if self.seen > self.cap:
                self.crossed = True
                raise BodyTooLarge
        return message

    async def send(self, message: Message) -> None:
        if self.crossed:
            return
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        await self._send(message)

    async def refuse(self) -> None:
        """Answers 413 (once the cap is crossed, before the app answered)."""
        self.status = 413
        await _too_large(self.scope, self._receive, self._send, self.cap)


def _declared(scope: Scope) -> int:
    """The request's Content-Length, 0 when absent or not a number (the bytes are counted)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


async def _too_large(scope: Scope, receive: Receive, send: Send, cap: int) -> None:
    error = PayloadTooLarge(f"request body exceeds the {cap}-byte limit")
    request_state.note(scope, request_state.ERROR_CODE, error.code)  # a metrics label
    # The connection closes: the rest of the body is never read.
    response = error_response(status_of(error), str(error), error.code, {"connection": "close"})
    await response(scope, receive, send)
