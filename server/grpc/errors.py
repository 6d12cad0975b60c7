"""Errors as gRPC statuses: the same domain classes as HTTP, the same stable codes.

server/http/errors.py decides each domain error's HTTP status (`status_of`, one table); this
module maps that status to a gRPC status (GRPC_STATUS), so a class declared there reaches both
protocols and the two tables cannot disagree. Every error carries graphgate's code in the
trailing metadata (`graphgate-code`), and a throttle its retry hint (`retry-after`, whole
seconds, as the HTTP header). Bad input is never INTERNAL: INTERNAL is a bug, logged, its
details never sent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final, NoReturn

import grpc
from grpc import aio

from server.errors import TooManyRequests
from server.http import errors as http_errors
from server.services.limits import Overloaded

log = logging.getLogger("graphgate.server")

CODE_KEY: Final = "graphgate-code"
RETRY_AFTER_KEY: Final = "retry-after"
# The gRPC status of each HTTP status server/http/errors.py answers (the inverse of gRPC's own
# HTTP mapping where one exists: grpc/grpc doc/http-grpc-status-mapping.md).
GRPC_STATUS: Final[Mapping[int, grpc.StatusCode]] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    # a version blocked by its tenant's policy: the request cannot succeed until that changes
    409: grpc.StatusCode.FAILED_PRECONDITION,
    # over a byte or run-time budget: gRPC's own status for a message over its size cap
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    422: grpc.StatusCode.FAILED_PRECONDITION,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    431: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
INTERNAL_CODE: Final = http_errors.INTERNAL[0]


class Refusal(Exception):
    """An answer the gRPC edge gives before any service runs (metadata over its caps): a status
    and a code of server/http/limits.py's table, as HTTP answers them before the app."""

    def __init__(self, status: grpc.StatusCode, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def status_of(error: Exception) -> tuple[grpc.StatusCode, str]:
    """The gRPC status and graphgate's code of an error; INTERNAL for anything unknown."""
    if isinstance(error, Refusal):
        return error.status, error.code
    try:
        http_status = http_errors.status_of(error)
    except StopIteration:  # no domain class: a bug
        return grpc.StatusCode.INTERNAL, INTERNAL_CODE
    return GRPC_STATUS[http_status], str(getattr(error, "code", INTERNAL_CODE))


def trailing_metadata(error: Exception, code: str) -> tuple[tuple[str, str], ...]:
    metadata: tuple[tuple[str, str], ...] = ((CODE_KEY, code),)
    if isinstance(error, TooManyRequests | Overloaded):
        metadata += ((RETRY_AFTER_KEY, str(error.retry_after_s)),)
    return metadata


async def abort(context: aio.ServicerContext[object, object], error: Exception) -> NoReturn:
    """Ends the call with the error's status, its message and its code (trailing metadata)."""
    status, code = status_of(error)
    if status is grpc.StatusCode.INTERNAL:
        log.error("unhandled error on a gRPC call", exc_info=error)
        message = "internal server error"
    else:
        message = str(error)
    await context.abort(status, message, trailing_metadata=trailing_metadata(error, code))
    raise AssertionError("unreachable: context.abort raises")  # for the type checker
