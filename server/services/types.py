"""Values shared by the services and the routes (no FastAPI here); the errors are in server/http/errors.py."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from server.dispatch import RemoteModel
from server.dispatch.signing import Provenance
from server.errors import InvalidName
from validator import Policy, Report, TensorSpec

# Tenant, model and operator names: matched whole (re.fullmatch), so "abc\n" is not "abc".
NAME: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def check_name(kind: str, name: str) -> str:
    """`name` if it is a valid tenant, model or operator name, else InvalidName."""
    if NAME.fullmatch(name) is None:
        raise InvalidName(f"{kind} name must match ^{NAME.pattern}$, got {name!r}")
    return name


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
    batching: Mapping[str, Any] | None = None  # the admin's override (server/dispatch/batching.py)
    provenance: Mapping[str, Any] | None = None  # who signed it (Provenance JSON); None: unsigned

    @property
    def label(self) -> tuple[str, str, int]:
        """What a worker crash is charged to (server/dispatch: quarantine)."""
        return (self.tenant_id, self.name, self.version)


@dataclass(frozen=True, slots=True)
class RegistrationRules:
    """What a new version is registered against, read in the registering transaction: the
    tenant's policy (a version validated under another is blocked) and its quotas (0: none)."""

    policy: Policy
    max_models: int = 0
    max_versions: int = 0
    max_storage_bytes: int = 0


# -- what the use cases return (routes turn them into JSON) ----------------------------------


@dataclass(frozen=True, slots=True)
class UploadedModel:
    """A model version just stored: ready, with the validator's report and, when it came
    signed, who signed it."""

    name: str
    version: int
    status: str
    report: Report
    provenance: Provenance | None = None


@dataclass(frozen=True, slots=True)
class CheckedModel:
    """A dry run's answer: the report and, when a signature came, who signed it."""

    report: Report
    provenance: Provenance | None = None


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
    provenance: Mapping[str, Any] | None = None  # who signed it (Provenance JSON); None: unsigned
    dims: Mapping[str, int] | None = None  # the upload's declared dims (`dims`); None: none


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
