"""ASGI middleware: a byte cap on request bodies, enforced while they stream (413 on excess)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(Exception):
    """Raised inside the app's receive() when the body crosses the cap."""


class BodyLimit:
    """Caps the bodies of requests to `paths` at `max_bytes`.

    Content-Length above the cap is refused before reading; the bytes are counted as well,
    since Content-Length can lie or be absent (chunked). Once crossed, whatever the app
    would answer is replaced by the 413.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, paths: Iterable[str]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.paths = tuple(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") not in self.paths:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        await self._guarded(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        seen = 0
        crossed = False
        started = False

        async def counting_receive() -> Message:
            nonlocal seen, crossed
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    crossed = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if not crossed:
                started = True
                await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not crossed:
                raise
        if crossed and not started:
            await self._too_large(send)

    async def _too_large(self, send: Send) -> None:
        body = json.dumps(
            {
                "error": f"request body exceeds the {self.max_bytes}-byte limit",
                "code": "PAYLOAD_TOO_LARGE",
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
