"""The one table from errors to HTTP responses: every error body is {"error": ..., "code": ...}."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "HTTP_ERROR")
    return JSONResponse({"error": str(exc.detail), "code": code}, status_code=exc.status_code)


async def _bad_request(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"msg": "invalid request"}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return JSONResponse(
        {
            "error": f"{where}: {first['msg']}" if where else str(first["msg"]),
            "code": "BAD_REQUEST",
        },
        status_code=400,
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _bad_request)
