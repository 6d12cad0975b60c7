"""The one table from errors to HTTP responses: every error body is {"error": ..., "code": ...}.

Every error that reaches HTTP declares its code in its class (`code`) and its meaning in its
docstring's first paragraph; its status is in STATUS below. The README's error-code tables are
generated from these (server/cli/doc_tables.py), so a new error class is documented by declaring it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from executor import ExecutionError
from executor.errors import (
    DeadlineExceeded,
    InputTooLarge,
    RequestOverBudget,
    RunCancelled,
    TensorTooLarge,
)
from server.errors import (
    BadRequest,
    CompileTimeout,
    Conflict,
    Forbidden,
    ModelRejected,
    NotFound,
    PayloadTooLarge,
    ServiceError,
    SignatureRefused,
    TooManyRequests,
    Unauthorized,
    WorkerUnavailable,
)
from server.http import request_state
from server.services.limits import Overloaded
from server.storage import StorageUnavailable

log = logging.getLogger("graphgate.server")
Handler = Callable[[Request, Any], Response | Awaitable[Response]]  # Starlette's handler type

# Most specific first: the first class the error is an instance of decides the status. Each
# class stands for itself and its subclasses (server/v2/errors.py, server/services/limits.py).
STATUS: Final[tuple[tuple[type[Exception], int], ...]] = (
    (BadRequest, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (PayloadTooLarge, 413),
    (ModelRejected, 422),
    (TooManyRequests, 429),
    (WorkerUnavailable, 503),
    (CompileTimeout, 422),
    (SignatureRefused, 422),
    (Overloaded, 503),
    (ServiceError, 400),
    (InputTooLarge, 413),
    (TensorTooLarge, 413),
    (RequestOverBudget, 413),
    (DeadlineExceeded, 504),
    (RunCancelled, 499),
    (ExecutionError, 400),
    (StorageUnavailable, 503),
)
# Errors Starlette and FastAPI raise themselves (no route, no such method, an unreadable body).
HTTP_CODES: Final[Mapping[int, tuple[str, str]]] = {
    400: (
        "BAD_REQUEST",
        "a request the route cannot read: a missing form part, a truncated or malformed "
        "multipart body",
    ),
    401: ("UNAUTHORIZED", "no key, an unknown key or a revoked key"),
    403: ("FORBIDDEN", "a tenant key on an admin route"),
    404: (
        "NOT_FOUND",
        "no such route, model or version in the caller's tenant (another tenant's model is "
        "not found either)",
    ),
    405: ("METHOD_NOT_ALLOWED", "the route exists, not with this method"),
    413: ("PAYLOAD_TOO_LARGE", "an upload or request body (gRPC: a message) over its byte cap"),
    415: ("UNSUPPORTED_MEDIA_TYPE", "a body in a content type the route does not take"),
    # nginx's convention: no client reads it, the metrics and the log count it apart from errors
    499: ("CLIENT_DISCONNECTED", "the client went away before its request body was read"),
}
INTERNAL: Final = (
    "INTERNAL",
    "a bug in graphgate (an output that disagrees with its inferred shape among them): logged, "
    "never a traceback in the body",
)
# Classes raised by the executor, whose module states their meaning only in their names.
MEANINGS: Final[Mapping[type[Exception], str]] = {
    InputTooLarge: "the decoded feeds of one request over `GRAPHGATE_MAX_REQUEST_BYTES`",
}


def handler_for(handlers: Mapping[Any, Handler], error: Exception) -> Handler | None:
    """The app's handler of `error`: the first of its classes (most derived first) that has
    one, as Starlette's exception middleware looks it up (the infer fast path asks here)."""
    for kind in type(error).__mro__:
        if (handler := handlers.get(kind)) is not None:
            return handler
    return None


def status_of(error: Exception | type[Exception]) -> int:
    kind = error if isinstance(error, type) else type(error)
    return next(status for base, status in STATUS if issubclass(kind, base))


def error_response(
    status: int, message: str, code: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": message, "code": code}, status_code=status, headers=headers)


def _noted(request: Request, code: str) -> str:
    """Leaves the code in the request state: the metrics middleware counts failures by it."""
    request_state.note(request.scope, request_state.ERROR_CODE, code)
    return code


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    code = _noted(request, str(getattr(exc, "code", "ERROR")))
    body: dict[str, object] = {"error": str(exc), "code": code}
    if isinstance(exc, ModelRejected):
        body["diagnostics"] = [d.to_json() for d in exc.diagnostics]
    return JSONResponse(body, status_code=status_of(exc), headers=_headers(exc))


def _headers(exc: Exception) -> dict[str, str] | None:
    if isinstance(exc, Unauthorized):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(exc, TooManyRequests | Overloaded):
        return {"Retry-After": str(exc.retry_after_s)}
    return None


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if isinstance(exc.__cause__, ClientDisconnect):
        # FastAPI turns a client leaving mid multipart form into "error parsing the body" (400)
        return await _disconnected(request, exc.__cause__)
    code, _meaning = HTTP_CODES.get(exc.status_code, ("HTTP_ERROR", ""))
    return error_response(exc.status_code, str(exc.detail), _noted(request, code), exc.headers)


async def _bad_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"msg": "invalid request"}
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = f"{where}: {first['msg']}" if where else str(first["msg"])
    return error_response(400, message, _noted(request, HTTP_CODES[400][0]))


async def _disconnected(request: Request, _exc: Exception) -> JSONResponse:
    # Not a server error: one line, no traceback; the answer goes nowhere but to the metrics.
    code = _noted(request, HTTP_CODES[499][0])
    log.info("client disconnected mid-request: %s %s", request.method, request.url.path)
    return error_response(499, "client disconnected", code)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    # NOTE: never a traceback or a native error string in the body; the log has the details.
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal server error", INTERNAL[0])


def install(app: FastAPI) -> None:
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _bad_request)
    app.add_exception_handler(ClientDisconnect, _disconnected)
    for kind, _status in STATUS:
        app.add_exception_handler(kind, _domain_error)
    app.add_exception_handler(Exception, _internal)
