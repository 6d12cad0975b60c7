"""The V2 infer endpoint's own way in: `POST /v2/models/{name}[/versions/{v}]/infer` skips the
middleware stack and the router, and gets what they give it from the same pieces, in one frame.

NOTE: why. A tiny model's inference costs the event loop ~0.5 ms, and the loop is the one
thread every request crosses. Through the full stack (Starlette's error middleware, FastAPI's
telemetry and body-limit wrappers, server/http/metrics.py, server/http/body_limit.py, the exception
middleware, FastAPI's exit stack, the router trying each route's regex, Starlette's endpoint
wrapper) every resumption of the endpoint's awaits walks ~25 coroutine frames. Here the same
behaviour is composed flat, each piece from its one home:

- the body cap and its 413: server/http/body_limit.py's BodyGuard (the cap of the full stack's
  BodyLimit for these paths, `GRAPHGATE_MAX_INFER_BYTES`);
- the inference metrics: server/http/metrics.py's record_inference, with the same labels;
- domain errors to HTTP: the app's exception handlers, i.e. the one table of server/http/errors.py,
  looked up by the error's class like Starlette does;
- the 500 safety net: the app's handler for Exception (a JSON body, never a traceback), then
  the error goes on to uvicorn, which logs it and closes the connection, as after the full
  stack's ServerErrorMiddleware.

Any other request, and an infer path the full stack would treat specially (a trailing slash
redirected, a root path), goes through the full stack.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from server.http.body_limit import BodyGuard
from server.http.errors import Handler, handler_for
from server.http.metrics import record_inference
from server.http.paths import INFER

Endpoint = Callable[[Request], Awaitable[Response]]


def infer_path_params(path: str) -> dict[str, str] | None:
    """The path parameters of an infer path (`name`, maybe `version`), None for other paths:
    the route table's own reading (server/http/paths.py)."""
    return INFER.match(path)


class InferFastPath:
    """Outermost ASGI app: infer requests to `endpoint`, everything else to `app` (the full
    middleware stack). `handlers` are the app's exception handlers (FastAPI's
    `exception_handlers`: classes to handlers, Exception's being the 500 one)."""

    def __init__(self, app: ASGIApp, endpoint: Endpoint, handlers: Mapping[Any, Handler]) -> None:
        self.app = app
        self.endpoint = endpoint
        self.internal = handlers[Exception]
        self.handlers = {
            kind: handler
            for kind, handler in handlers.items()
            if isinstance(kind, type) and kind is not Exception
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            params = INFER.match(scope["path"])
            if params is not None:
                await self.infer(scope, receive, send, params)
                return
        await self.app(scope, receive, send)

    async def infer(
        self, scope: Scope, receive: Receive, send: Send, params: dict[str, str]
    ) -> None:
        """One infer request whose path the caller matched already (server/main.py)."""
        scope["path_params"] = params
        await self._infer(scope, receive, send)

    async def _infer(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        state = scope["app"].state
        guard = BodyGuard(scope, receive, send, state.settings.max_infer_bytes)
        try:
            await self._answer(scope, guard)
        except Exception as error:
            await self._internal_error(scope, receive, send, error, started=guard.started)
            raise
        finally:
            status = guard.status if guard.status is not None else 500
            record_inference(state.metrics, scope, status, time.perf_counter() - started)

    async def _answer(self, scope: Scope, guard: BodyGuard) -> None:
        request = Request(scope, guard.receive, guard.send)
        try:
            response = await self.endpoint(request)
        except Exception as error:
            if guard.crossed:  # whatever the endpoint raised, the body was over its cap
                await guard.refuse()
                return
            handler = handler_for(self.handlers, error)
            if handler is None:
                raise
            response = await _awaited(handler(request, error))
        await response(scope, guard.receive, guard.send)

    async def _internal_error(
        self, scope: Scope, receive: Receive, send: Send, error: Exception, started: bool
    ) -> None:
        """The 500 (the app's handler for Exception), unless an answer has started already;
        then the connection closes (uvicorn), as after the full stack."""
        if started:
            return
        response = await _awaited(self.internal(Request(scope, receive, send), error))
        await response(scope, receive, send)


async def _awaited(response: Response | Awaitable[Response]) -> Response:
    return response if isinstance(response, Response) else await response
