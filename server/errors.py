"""graphgate's domain errors: each a stable code; server/http/errors.py maps each class to an
HTTP status. The bottom of server/: every layer raises these and none of them imports upward."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Final

from validator import Diagnostic

QUOTED_CHARS: Final = 200  # of a name or any quoted text a diagnostic repeats
MESSAGE_CHARS: Final = 2048  # of one diagnostic's message, and of an error's
DIAGNOSTICS_BYTES: Final = 60_000  # of a rejection's diagnostics as JSON (its body < 64 KiB)
_QUOTED: Final = re.compile(r"""(['"])([^'"]{""" + str(QUOTED_CHARS) + r"""})[^'"]+\1""")
_LONG_WORD: Final = re.compile(r"(\S{" + str(QUOTED_CHARS) + r"})\S+")  # a name not quoted


class ServiceError(Exception):
    """A domain error with a stable code; server/errors.py maps each class to an HTTP status."""

    # Not a ClassVar: declared as the executor's ExecutionError declares it, so that a class may
    # be both (server/v2/errors.py: one code per condition, whichever layer finds it).
    code = "SERVICE_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ServiceError):
    """Unknown model or version, or one of another tenant (existence is never revealed)."""

    code = "NOT_FOUND"


class Unauthorized(ServiceError):
    code = "UNAUTHORIZED"


class Forbidden(ServiceError):
    code = "FORBIDDEN"


class BadRequest(ServiceError):
    code = "BAD_REQUEST"


class PayloadTooLarge(ServiceError):
    code = "PAYLOAD_TOO_LARGE"


class TooManyRequests(ServiceError):
    """The family of the tenant's limits below, answered with `Retry-After`."""

    code = "TOO_MANY_REQUESTS"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Conflict(ServiceError):
    """The request conflicts with the stored state (a tenant name that exists)."""

    code = "CONFLICT"


class ModelRejected(ServiceError):
    """The upload failed validation, lowering or the ONNX gate; `diagnostics` lists every problem."""

    code = "VALIDATION_FAILED"

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic]) -> None:
        # A program names its ops and variables itself: what a diagnostic quotes of it is cut
        # (QUOTED_CHARS), a message to MESSAGE_CHARS, the list to DIAGNOSTICS_BYTES, so an
        # answer, a kept rejection and the console's page of it stay small.
        kept, omitted = bounded_diagnostics(diagnostics)
        if omitted:
            message = f"{message} ({len(kept)} shown, {omitted} more not shown)"
        super().__init__(message[:MESSAGE_CHARS])
        self.diagnostics = kept


class InvalidName(BadRequest):
    """A model or tenant name outside `^[a-z0-9][a-z0-9_.-]{0,63}$`."""

    code = "INVALID_NAME"


# -- the operator's side (server/services/admins.py, policies.py) ------------------------------


class ReadOnlyOperator(Forbidden):
    """A viewer's key on an admin route that changes something: only role admin may."""

    code = "ADMIN_ROLE_REQUIRED"


class TenantSuspended(Forbidden):
    """The tenant is suspended by an operator: every tenant route refuses its keys."""

    code = "TENANT_SUSPENDED"


class QuotaExceeded(Forbidden):
    """An upload over the tenant's quota of models or of versions (storage bytes: 413
    `STORAGE_QUOTA`)."""

    code = "QUOTA_EXCEEDED"


class ResponseOverBudget(PayloadTooLarge):
    """An answer over the tenant's answer budget (`max_response_bytes`, or the tighter
    `max_json_response_bytes` for JSON outputs): refused before the run from the output shapes,
    or as the outputs sized by data are encoded; binary outputs or fewer rows fit more."""

    code = "RESPONSE_OVER_BUDGET"


class ModelBlocked(Conflict):
    """The version no longer passes its tenant's policy (it was tightened): kept, not served."""

    code = "MODEL_BLOCKED_BY_POLICY"


class OpNotAllowedByPolicy(ModelRejected):
    """The upload uses an op its tenant's policy does not allow (`allowed_ops`)."""

    code = "OP_NOT_ALLOWED_BY_POLICY"


class OverTenantPolicy(ModelRejected):
    """The upload is over one of its tenant's policy limits; the message names the field."""

    code = "OVER_TENANT_POLICY"


class InvalidRules(BadRequest):
    """A policy or quota change with an unknown field or a value out of range."""

    code = "INVALID_POLICY"


# -- what the worker pool answers when a worker cannot (server/dispatch): each a 503 but a
# compile timeout --------------------------------------------------------------------------------


class WorkerUnavailable(ServiceError):
    """The family of worker failures below: the request did not complete, the server is fine."""

    code = "WORKER_UNAVAILABLE"


class WorkerCrashed(WorkerUnavailable):
    """The worker process running the request died (a native crash, a kill); it was replaced
    and the request may be retried."""

    code = "WORKER_CRASHED"


class WorkerOutOfMemory(WorkerUnavailable):
    """The request took its worker over the per-worker memory cap
    (`GRAPHGATE_WORKER_MEMORY_MB`); the worker was replaced."""

    code = "WORKER_OUT_OF_MEMORY"


class ModelQuarantined(WorkerUnavailable):
    """This model version crashed workers repeatedly and is not run until an admin releases it."""

    code = "MODEL_QUARANTINED"


class CompileTimeout(ServiceError):
    """Validating and compiling the upload took longer than `GRAPHGATE_COMPILE_TIMEOUT_S`."""

    code = "COMPILE_TIMEOUT"


def bounded_diagnostics(diagnostics: Sequence[Diagnostic]) -> tuple[list[Diagnostic], int]:
    """Each diagnostic with its quoted text cut; as many as fit DIAGNOSTICS_BYTES, and how
    many more there were."""
    kept: list[Diagnostic] = []
    size = 0
    for diagnostic in diagnostics:
        cut = _bounded(diagnostic)
        size += len(json.dumps(cut.to_json())) + 2
        if size > DIAGNOSTICS_BYTES and kept:
            return kept, len(diagnostics) - len(kept)
        kept.append(cut)
    return kept, 0


def _bounded(diagnostic: Diagnostic) -> Diagnostic:
    message = _QUOTED.sub(lambda m: f"{m[1]}{m[2]}…{m[1]}", diagnostic.message)
    message = _LONG_WORD.sub(lambda m: f"{m[1]}…", message)
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 1] + "…"
    return dataclasses.replace(
        diagnostic,
        message=message,
        op_type=_cut(diagnostic.op_type),
        var=_cut(diagnostic.var),
    )


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= QUOTED_CHARS:
        return text
    return text[:QUOTED_CHARS] + "…"
