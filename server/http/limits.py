"""Connection-level caps uvicorn's default HTTP protocol lacks: head size, header count, request
line, and time to send a head, a body, or anything at all on an idle connection.

They live in the protocol, before the ASGI app, because the costs are paid there: httptools
accumulates a header name or value, and uvicorn the URL, by concatenating the pieces each read
brings (quadratic: a 64 MiB header kept the server busy for 7 s), and a connection that never
finishes its head holds its socket forever. So the bytes of a head are counted as they arrive
and the request is refused at the cap (431, or 414 for the request line), with the same error
body as the app's errors; a head or a body that stalls is answered 408 and the connection closed
(the app's `receive()` then sees a disconnect, so whatever the request held is released).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import httptools
from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

# The scope's list of callbacks to call if the client goes away before its answer completes:
# what the infer endpoint cancels a run with, instead of a task per request that waits for
# the disconnect message (its creation and cancel cost the event loop more than this list).
ON_DISCONNECT: Final = "graphgate.on_disconnect"

HEAD_TOO_LARGE: Final = "HEADER_TOO_LARGE"
TOO_MANY_HEADERS: Final = "TOO_MANY_HEADERS"
REQUEST_LINE_TOO_LONG: Final = "REQUEST_LINE_TOO_LONG"
HEAD_TIMEOUT: Final = "HEADER_TIMEOUT"
BODY_TIMEOUT: Final = "BODY_TIMEOUT"
# Codes answered here, before the app: the README documents them beside the app's own.
CODES: Final = {
    HEAD_TOO_LARGE: (
        431,
        "a request head (request line and headers; gRPC: metadata) over "
        "`GRAPHGATE_MAX_HEADER_BYTES`",
    ),
    TOO_MANY_HEADERS: (431, "more headers (gRPC: metadata entries) than `GRAPHGATE_MAX_HEADERS`"),
    REQUEST_LINE_TOO_LONG: (414, "a request line over `GRAPHGATE_MAX_REQUEST_LINE_BYTES`"),
    HEAD_TIMEOUT: (408, "a request head not complete within `GRAPHGATE_HEADER_TIMEOUT_S`"),
    BODY_TIMEOUT: (
        408,
        "no body bytes for `GRAPHGATE_BODY_TIMEOUT_S` while the body is unfinished",
    ),
}


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_header_bytes: int
    max_headers: int
    max_request_line_bytes: int
    header_timeout_s: float
    body_timeout_s: float


class _Refused(Exception):
    """Raised in a parser callback to stop parsing; data_received answers `code`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the caps above; `limits` is set by `protocol_class`."""

    limits: HttpLimits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._in_head = False
        self._head_bytes = 0
        self._header_count = 0
        self._refusal: _Refused | None = None
        self._last_data = self.loop.time()
        self._watch: asyncio.TimerHandle | None = None
        # NOTE: uvicorn arms its keep-alive timer only after a response; a connection that
        # never sends a byte would otherwise be held forever.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_watch()
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and cycle.disconnected:  # the answer had not completed
            # None from now on: a callback added later is not called; the endpoint then waits
            # for the disconnect message as under any server (it comes at once).
            callbacks = cycle.scope.pop(ON_DISCONNECT, None) or ()  # type: ignore[typeddict-item]
            for callback in callbacks:
                callback()

    def data_received(self, data: bytes) -> None:
        self._last_data = self.loop.time()
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._refusal is not None:
                self._refuse(self._refusal.code, str(self._refusal))
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._in_head:
            # Counted after feeding: a read is at most a few hundred KiB, and the whole read is
            # head bytes when the head is still unfinished after it.
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._refuse(HEAD_TOO_LARGE, _too_large(self.limits.max_header_bytes, "head"))

    # -- parser callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[ON_DISCONNECT] = []  # type: ignore[typeddict-unknown-key]
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._watch_for(self.limits.header_timeout_s, self._head_deadline)

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > self.limits.max_request_line_bytes:
            self._stop(REQUEST_LINE_TOO_LONG, _too_large(self.limits.max_request_line_bytes, "URL"))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._stop(
                TOO_MANY_HEADERS,
                f"expected at most {self.limits.max_headers} headers, got more",
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_watch()
        previous = self.cycle
        super().on_headers_complete()
        if self.cycle is not None and self.cycle is not previous:
            _write_head_with_body(self.cycle)
        if self.cycle is not None and self.cycle.more_body:
            self._watch_for(self.limits.body_timeout_s, self._body_deadline)

    def on_message_complete(self) -> None:
        self._stop_watch()
        super().on_message_complete()
        # uvicorn pauses reading while a body piles up and resumes only when the app asks
        # for the next message; reading on is how a client's going away is seen (ON_DISCONNECT)
        # while its request runs. A pipelined next request still waits (on_headers_complete).
        self.flow.resume_reading()

    # -- deadlines -------------------------------------------------------------------------

    def _watch_for(self, seconds: float, check: Any) -> None:
        self._stop_watch()
        self._watch = self.loop.call_later(seconds, check)

    def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _head_deadline(self) -> None:
        self._watch = None
        if self._in_head:
            seconds = self.limits.header_timeout_s
            self._refuse(HEAD_TIMEOUT, f"expected a request head within {seconds:g} s, got none")

    def _body_deadline(self) -> None:
        """Fires `body_timeout_s` after the last read; re-arms while bytes keep coming, or while
        reading is paused by flow control (the app has not taken the body yet)."""
        self._watch = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or cycle.response_started:
            return
        idle = self.loop.time() - self._last_data
        if self.flow.read_paused or idle < self.limits.body_timeout_s:
            self._watch_for(max(self.limits.body_timeout_s - idle, 0.01), self._body_deadline)
            return
        seconds = self.limits.body_timeout_s
        self._refuse(BODY_TIMEOUT, f"expected body bytes within {seconds:g} s, got none")

    # -- answers ---------------------------------------------------------------------------

    def _stop(self, code: str, message: str) -> None:
        self._refusal = _Refused(code, message)
        raise self._refusal

    def _refuse(self, code: str, message: str) -> None:
        """Answers `code` (the app's error shape) and closes the connection."""
        if self.transport.is_closing():
            return
        self.logger.info("refused a request: %s (%s)", message, code)
        status = CODES[code][0]
        body = json.dumps({"error": message, "code": code}).encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
                body,
            ]
        )
        self._stop_watch()
        self.transport.write(b"".join(head))
        self.transport.close()


class _HeadWithBody:
    """The transport as one request's cycle sees it: a response head is held until the body's
    first write, and both leave in one `writelines` (one send() on the socket, not two).

    NOTE: uvicorn writes the head and the body of a response with a write each; on a small
    response that is two syscalls and two loop write paths per request, ~a quarter of the event
    loop's time per V2 inference. The cycle asks to hold a head only when its response has a
    Content-Length and the request is not HEAD: then a body write always follows (uvicorn writes
    even an empty body), whereas a streamed head waits for no chunk.
    """

    __slots__ = ("_head", "_hold_next", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._hold_next = False
        self._head: bytes | None = None

    def hold_next_write(self) -> None:
        self._hold_next = True

    def write(self, data: bytes) -> None:
        if self._hold_next:
            self._hold_next = False
            self._head = data
            return
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.writelines((head, data))
            return
        self._transport.write(data)

    def close(self) -> None:
        # The app failed between head and body: the head leaves, as it did unheld.
        if self._head is not None:
            self._transport.write(self._head)
            self._head = None
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class _HeadWithBodyCycle(RequestResponseCycle):
    """uvicorn's cycle whose `send` asks its `_HeadWithBody` transport to hold a head that a
    body will follow. A subclass, not a closure over the cycle's bound `send`: that closure
    made every request's cycle a reference cycle, left for the garbage collector, whose full
    collections then paused the event loop for ~100 ms at a time (the p99 of busy serving)."""

    transport: _HeadWithBody  # type: ignore[assignment]

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and _has_length(message):
            self.transport.hold_next_write()
        await super().send(message)


def _write_head_with_body(cycle: RequestResponseCycle) -> None:
    """Makes `cycle` write each response's head with its body (see `_HeadWithBody`)."""
    if cycle.scope["method"] == "HEAD":
        return
    cycle.transport = _HeadWithBody(cycle.transport)  # type: ignore[assignment]
    cycle.__class__ = _HeadWithBodyCycle  # same layout: uvicorn made it, this adds a method


def _has_length(message: ASGISendEvent) -> bool:
    headers: Iterable[tuple[bytes, bytes]] = message.get("headers", ())  # type: ignore[assignment]
    return any(name.lower() == b"content-length" for name, _ in headers)


def _too_large(cap: int, what: str) -> str:
    return f"expected a request {what} of at most {cap} bytes, got more"


def protocol_class(limits: HttpLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for uvicorn's `http=` option, bound to `limits`."""
    return type("GraphgateHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})
