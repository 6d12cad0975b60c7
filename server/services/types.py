"""Values and domain errors shared by the services and the routes (no FastAPI here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from validator import Diagnostic, Report, TensorSpec

if TYPE_CHECKING:  # server.workers imports this module (its errors are ServiceErrors)
    from server.workers import RemoteModel


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: always derived from the API key, never from the request body or path."""

    tenant_id: str  # "" for the admin
    key_id: str
    is_admin: bool  # an operator key: admin or viewer
    operator: str = ""  # the operator's name ("root" for the first-start or env admin key)
    read_only: bool = False  # a viewer: reads every admin route, changes nothing


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """One ready model version of one tenant, compiled in the workers."""

    tenant_id: str
    name: str
    version: int
    compiled: RemoteModel
    batching: Mapping[str, Any] | None = None  # the admin's override (server/batching.py)

    @property
    def label(self) -> tuple[str, str, int]:
        """What a worker crash is charged to (server/workers: quarantine)."""
        return (self.tenant_id, self.name, self.version)


# -- what the use cases return (routes turn them into JSON) ----------------------------------


@dataclass(frozen=True, slots=True)
class UploadedModel:
    """A model version just stored: ready, with the validator's report."""

    name: str
    version: int
    status: str
    report: Report


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """One stored version of a model; `report` is its Report as stored (Report.to_json())."""

    version: int
    status: str
    created: datetime  # naive UTC, as the database holds it
    program_sha256: str
    params_sha256: str | None
    onnx_sha256: str
    report: Mapping[str, Any]
    batching: Mapping[str, Any] | None = None  # the admin's batching override, if any


@dataclass(frozen=True, slots=True)
class StoredModel:
    """A model of the caller's tenant and its versions, oldest first."""

    name: str
    versions: tuple[StoredVersion, ...]
    latest: StoredVersion | None  # the newest ready version


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """V2 model metadata of one resolved model version."""

    name: str
    version: int
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A new API key: `key` is shown in this answer and never again."""

    tenant: str
    key_id: str
    key: str


@dataclass(frozen=True, slots=True)
class KeyInfo:
    key_id: str
    role: str
    created: datetime | None
    revoked: datetime | None


@dataclass(frozen=True, slots=True)
class TenantInfo:
    tenant: str
    created: datetime | None
    keys: tuple[KeyInfo, ...]


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
        super().__init__(message)
        self.diagnostics = list(diagnostics)


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
