"""The one table from errors to HTTP responses: every error body is {"error": ..., "code": ...}."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from executor import ExecutionError
from executor.errors import InputTooLarge, TensorTooLarge
from server.services.types import (
    BadRequest,
    Conflict,
    Forbidden,
    ModelRejected,
    NotFound,
    PayloadTooLarge,
    ServiceError,
    TooManyRequests,
    Unauthorized,
)

log = logging.getLogger("graphgate.server")

# Most specific first: the first class the error is an instance of decides the status.
_STATUS: Final[tuple[tuple[type[Exception], int], ...]] = (
    (BadRequest, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (PayloadTooLarge, 413),
    (ModelRejected, 422),
    (TooManyRequests, 429),
    (ServiceError, 400),
    (InputTooLarge, 413),
    (TensorTooLarge, 413),
    (ExecutionError, 400),
)
_HTTP_CODES: Final = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
}


def error_response(
    status: int, message: str, code: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": message, "code": code}, status_code=status, headers=headers)


def _noted(request: Request, code: str) -> str:
    """Leaves the code in the request state: the metrics middleware counts failures by it."""
    request.state.error_code = code
    return code


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    status = next(s for kind, s in _STATUS if isinstance(exc, kind))
    code = _noted(request, str(getattr(exc, "code", "ERROR")))
    body: dict[str, object] = {"error": str(exc), "code": code}
    if isinstance(exc, ModelRejected):
        body["diagnostics"] = exc.diagnostics
    return JSONResponse(body, status_code=status, headers=_headers(exc))


def _headers(exc: Exception) -> dict[str, str] | None:
    if isinstance(exc, Unauthorized):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(exc, TooManyRequests):
        return {"Retry-After": str(exc.retry_after_s)}
    return None


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = _noted(request, _HTTP_CODES.get(exc.status_code, "HTTP_ERROR"))
    return error_response(exc.status_code, str(exc.detail), code, exc.headers)


async def _bad_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"msg": "invalid request"}
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = f"{where}: {first['msg']}" if where else str(first["msg"])
    return error_response(400, message, _noted(request, "BAD_REQUEST"))


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    # NOTE: never a traceback or a native error string in the body; the log has the details.
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal server error", "INTERNAL")


def install(app: FastAPI) -> None:
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _bad_request)
    for kind, _status in _STATUS:
        app.add_exception_handler(kind, _domain_error)
    app.add_exception_handler(Exception, _internal)
