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

import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from server.http.body_limit import BodyGuard
from server.http.metrics import record_inference
from server.http.paths import V2_INFER_PATHS

Endpoint = Callable[[Request], Awaitable[Response]]
Handler = Callable[[Request, Any], Response | Awaitable[Response]]  # Starlette's handler type


def _route_regex(templates: Iterable[str]) -> re.Pattern[str]:
    """One regex for the templates; `{param}` matches one path segment, as in a Starlette
    route, into a group of its name. No trailing slash: the router redirects those."""
    alternatives = []
    for index, template in enumerate(templates):
        # Each alternative's groups get its index: a name may repeat across templates.
        pattern = re.sub(r"\\\{([a-z_]+)\\\}", rf"(?P<\g<1>_{index}>[^/]+)", re.escape(template))
        alternatives.append(pattern)
    return re.compile(f"^(?:{'|'.join(alternatives)})$")


_INFER: Final = _route_regex(V2_INFER_PATHS)
_SUFFIX: Final = re.compile(r"_\d+$")


def infer_path_params(path: str) -> dict[str, str] | None:
    """The path parameters of an infer path (`name`, maybe `version`), None for other paths."""
    matched = _INFER.match(path)
    if matched is None:
        return None
    return {_SUFFIX.sub("", key): value for key, value in matched.groupdict().items() if value}


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
            params = infer_path_params(scope["path"])
            if params is not None:
                scope["path_params"] = params
                await self._infer(scope, receive, send)
                return
        await self.app(scope, receive, send)

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
            handler = self._handler_for(error)
            if handler is None:
                raise
            response = await _awaited(handler(request, error))
        await response(scope, guard.receive, guard.send)

    def _handler_for(self, error: Exception) -> Handler | None:
        for kind in type(error).__mro__:
            if (handler := self.handlers.get(kind)) is not None:
                return handler
        return None

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
