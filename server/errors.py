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


class InvalidDims(BadRequest):
    """The upload's `dims` form field is not `NAME=SIZE[,NAME=SIZE...]`."""

    code = "INVALID_DIMS"


class DimDeclarationRefused(ModelRejected):
    """The upload's `dims` name no unknown dim of the program, name the batch, or declare a
    size outside the policy's 1..max_dim; the diagnostics say which and what was expected."""

    code = "DIM_DECLARATION_REFUSED"


class InvalidRules(BadRequest):
    """A policy or quota change with an unknown field or a value out of range."""

    code = "INVALID_POLICY"


class InvalidSigningKey(InvalidRules):
    """A `signing_keys` value that is no PEM public key, or a key model_signing cannot verify
    with (elliptic curves P-256, P-384, P-521 only)."""

    code = "INVALID_SIGNING_KEY"


class InvalidSigningCa(InvalidRules):
    """A `signing_ca` value that is no PEM bundle of CA certificates."""

    code = "INVALID_SIGNING_CA"


# -- signed uploads (server/dispatch/signing.py): each a 422 ------------------------------------


class SignatureRefused(ServiceError):
    """The family of signature refusals below: the upload or check was not verified as signed by
    its tenant's trust.

    `signer`: who signed it, where known (audited); `file`: the file a mismatch names."""

    code = "SIGNATURE_REFUSED"

    # Keyword-only with defaults: an exception crosses the worker's pipe as cls(message) and its
    # __dict__ (pickle), so these come back too.
    def __init__(self, message: str, *, signer: str | None = None, file: str | None = None) -> None:
        super().__init__(message)
        self.signer = signer
        self.file = file


class SignatureMissing(SignatureRefused):
    """An upload or check without a `signature` part while its tenant's policy
    `require_signature` is on."""

    code = "SIGNATURE_MISSING"


class SignatureMalformed(SignatureRefused):
    """A `signature` part that is no model_signing key or certificate bundle: not JSON, over
    1 MiB, nested too deep, a field missing or unknown, a keyless (transparency-log) bundle."""

    code = "SIGNATURE_MALFORMED"


class SignatureMismatch(SignatureRefused):
    """The signed manifest does not list exactly the uploaded files with their digests (the
    message names the file); files are matched by the names they were uploaded under."""

    code = "SIGNATURE_MISMATCH"


class SignerUntrusted(SignatureRefused):
    """The signature does not verify with the tenant's `signing_keys`, or its certificate does
    not chain to `signing_ca` or names none of `signing_identities`."""

    code = "SIGNER_UNTRUSTED"


class CertificateExpired(SignatureRefused):
    """A certificate of the signature's chain had expired at upload time."""

    code = "CERTIFICATE_EXPIRED"


class CertificateNotYetValid(SignatureRefused):
    """A certificate of the signature's chain was not yet valid at upload time."""

    code = "CERTIFICATE_NOT_YET_VALID"


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
