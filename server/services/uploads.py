"""Tenant uploads and checks under the tenant's policy and quotas, audited; rejections kept.

Wraps ModelService: an upload is refused past its model or version quota (its storage quota
is ModelService's, where the artifact references are counted; its concurrency cap is the
compile queue's), is validated with the tenant's policy (a refusal names the policy field), and
leaves one audit row either way. The newest `keep` rejections per tenant are
kept with their full diagnostics so an operator can answer "why was my model refused".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import Model, Rejection, Tenant
from server.dispatch import Blob, Digests
from server.errors import (
    DimDeclarationRefused,
    InvalidDims,
    ModelRejected,
    NotFound,
    OpNotAllowedByPolicy,
    OverTenantPolicy,
    QuotaExceeded,
    SignatureRefused,
)
from server.services.audit import OK, REJECTED, Actor, AuditService
from server.services.limits import StorageQuotaExceeded
from server.services.models import ModelService
from server.services.policies import PolicyService
from server.services.signing_policy import SignatureFile
from server.services.types import CheckedModel, Principal, UploadedModel
from validator import Diagnostic
from validator.dims import DimSyntaxError, parse_dim_declarations

# Diagnostic codes that a tenant policy field decides, and that field.
POLICY_FIELD_OF: Final = {
    "OP_NOT_ALLOWED": "allowed_ops",
    "TOO_MANY_OPS": "max_ops",
    "TENSOR_TOO_LARGE": "max_tensor_bytes",
    "PARAMS_TOO_LARGE": "max_params_bytes",
    "ACTIVATIONS_TOO_LARGE": "max_activation_bytes_per_sample",
    "FLOPS_TOO_LARGE": "max_flops_per_sample",
    "LOOP_BOUND_OVER_POLICY": "max_loop_trips",
    "LOOP_UNBOUNDED": "max_loop_trips",
}


@dataclass(frozen=True, slots=True)
class KeptRejection:
    id: int
    tenant: str
    at: datetime  # naive UTC
    name: str
    code: str
    program_sha256: str
    params_sha256: str | None
    diagnostics: tuple[dict[str, Any], ...]


class UploadService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        models: ModelService,
        policies: PolicyService,
        audit: AuditService,
        *,
        keep: int,
        on_delete: Callable[[str, str, int | None], None] = lambda _t, _n, _v: None,
    ) -> None:
        self._sessions = sessions
        self._models = models
        self._policies = policies
        self._audit = audit
        self._keep = keep
        self._on_delete = on_delete  # (tenant id, name, version): its metric series go

    def upload(
        self,
        principal: Principal,
        actor: Actor,
        name: str,
        program: Blob,
        params: Blob | None,
        signature: SignatureFile | None = None,
        dims: str = "",
    ) -> UploadedModel:
        """`program`, `params`: bytes, or spool files (the HTTP upload's, hashed as they
        streamed in: their digests are taken from there, nothing is read again); `dims`: the
        upload's `dims` form field (NAME=SIZE,...; "" none), read first."""
        tenant_id = principal.tenant_id
        declared = declared_dims(dims)
        digests = Digests.of(program, params)  # the upload's one hash of its bytes
        shas = {"program_sha256": digests.program, "params_sha256": digests.params}
        try:
            self._check_quota(tenant_id, name)
            check = self._policies.signing.signature_check(tenant_id, signature)
            uploaded = self._models.upload(
                principal, name, program, params, digests, check, declared
            )
        except SignatureRefused as refused:
            self._keep_rejection(tenant_id, name, refused.code, [_as_diagnostic(refused)], shas)
            detail: dict[str, Any] = {**shas, "code": refused.code, **_signer_detail(refused)}
            self._audit.record(actor, "model.upload", name, REJECTED, detail=detail)
            raise
        except ModelRejected as rejected:
            own = self._policies.own_policy_fields(tenant_id)
            named = _named(rejected, actor.tenant, own)
            diagnostics = [d.to_json() for d in named.diagnostics]
            self._keep_rejection(tenant_id, name, named.code, diagnostics, shas)
            codes = sorted({str(d.code) for d in named.diagnostics})
            detail = {**shas, "code": named.code, "diagnostic_codes": codes}
            self._audit.record(actor, "model.upload", name, REJECTED, detail=detail)
            raise named from None
        except (QuotaExceeded, StorageQuotaExceeded) as refused:
            detail = {**shas, "code": refused.code}
            self._audit.record(actor, "model.upload", name, REJECTED, detail=detail)
            raise
        stored = {**shas, "version": uploaded.version}
        if uploaded.provenance is not None:
            stored |= {"signer": uploaded.provenance.signer}
            stored |= {"key_fingerprint": uploaded.provenance.key_fingerprint}
        self._audit.record(actor, "model.upload", f"{name}/{uploaded.version}", OK, detail=stored)
        return uploaded

    def check(
        self,
        principal: Principal,
        tenant: str,
        program: Blob,
        params: Blob | None,
        signature: SignatureFile | None = None,
        dims: str = "",
    ) -> CheckedModel:
        """The dry run with the caller's policy (the server's default for an operator): the
        signature verified as an upload's would be, then the program (at `dims`, as upload)."""
        tenant_id = "" if principal.is_admin else principal.tenant_id
        declared = declared_dims(dims)
        check = self._policies.signing.signature_check(tenant_id, signature)
        try:
            return self._models.check(program, params, tenant_id, check, declared)
        except ModelRejected as rejected:
            own = self._policies.own_policy_fields(tenant_id)
            raise _named(rejected, tenant, own) from None

    def delete(self, principal: Principal, actor: Actor, name: str, version: int | None) -> None:
        target = name if version is None else f"{name}/{version}"
        self._models.delete(principal, name, version)
        self._audit.record(actor, "model.delete", target)
        self._on_delete(principal.tenant_id, name, version)

    def rejections(self, tenant: str) -> list[KeptRejection]:
        """The tenant's kept rejections, newest first."""
        with self._sessions() as s:
            row = s.scalars(select(Tenant).where(Tenant.name == tenant)).first()
            if row is None:
                raise NotFound(f"no tenant {tenant!r}")
            query = select(Rejection).where(Rejection.tenant_id == row.id)
            kept = s.scalars(query.order_by(Rejection.id.desc())).all()
            return [_kept(tenant, r) for r in kept]

    def _check_quota(self, tenant_id: str, name: str) -> None:
        quota = self._policies.quota_of(tenant_id)
        if quota.max_models or quota.max_versions:
            models, versions = self._policies.counts(tenant_id)
            if (
                quota.max_models
                and models >= quota.max_models
                and not self._exists(tenant_id, name)
            ):
                raise QuotaExceeded(
                    f"quota max_models: expected at most {quota.max_models} models, "
                    f"got {models + 1}"
                )
            if quota.max_versions and versions >= quota.max_versions:
                raise QuotaExceeded(
                    f"quota max_versions: expected at most {quota.max_versions} stored versions, "
                    f"got {versions + 1}"
                )

    def _exists(self, tenant_id: str, name: str) -> bool:
        with self._sessions() as s:
            query = select(Model.id).where(Model.tenant_id == tenant_id, Model.name == name)
            return s.scalars(query).first() is not None

    def _keep_rejection(
        self,
        tenant_id: str,
        name: str,
        code: str,
        diagnostics: list[dict[str, Any]],
        shas: dict[str, str | None],
    ) -> None:
        with self._sessions.begin() as s:
            s.add(
                Rejection(
                    tenant_id=tenant_id,
                    name=name[:64],
                    code=code,
                    program_sha256=shas["program_sha256"] or "",
                    params_sha256=shas["params_sha256"],
                    diagnostics=json.dumps(diagnostics),
                )
            )
            s.flush()
            query = select(Rejection.id).where(Rejection.tenant_id == tenant_id)
            stale = s.scalars(query.order_by(Rejection.id.desc()).offset(self._keep)).all()
            for row_id in stale:
                s.delete(s.get_one(Rejection, row_id))


def declared_dims(text: str) -> dict[str, int]:
    """The `dims` form field read as `graphgate check --dim` reads its options; bad syntax is
    400 INVALID_DIMS, before anything is validated."""
    try:
        return parse_dim_declarations([text]) if text.strip() else {}
    except DimSyntaxError as e:
        raise InvalidDims(f"form field 'dims': {e}") from None


def _named(rejected: ModelRejected, tenant: str, own: frozenset[str]) -> ModelRejected:
    """The rejection named after the tenant's own policy field that refused it, if one did (a
    refusal by the server-wide policy stays VALIDATION_FAILED), or after the upload's `dims`
    when they are what validation refused."""
    diagnostics: Sequence[Diagnostic] = rejected.diagnostics
    for diagnostic in diagnostics:
        if str(diagnostic.code) == "DIM_DECLARATION":
            message = f"form field 'dims': {diagnostic.message}"
            return DimDeclarationRefused(message, diagnostics)
    for diagnostic in diagnostics:
        if str(diagnostic.code) == "OP_NOT_ALLOWED" and "allowed_ops" in own:
            message = f"op {diagnostic.op_type} is not allowed for tenant {tenant}"
            return OpNotAllowedByPolicy(message, diagnostics)
    for diagnostic in diagnostics:
        if (policy_field := POLICY_FIELD_OF.get(str(diagnostic.code))) in own:
            message = (
                f"the program is over tenant {tenant}'s policy {policy_field}: {diagnostic.message}"
            )
            return OverTenantPolicy(message, diagnostics)
    return rejected


def _as_diagnostic(refused: SignatureRefused) -> dict[str, Any]:
    """A signature refusal kept among the rejections: one entry shaped like a diagnostic."""
    return {
        "code": refused.code,
        "message": refused.message,
        "severity": "error",
        "block": None,
        "op_index": None,
        "op_type": None,
        "var": None,
    }


def _signer_detail(refused: SignatureRefused) -> dict[str, str]:
    """What the audit keeps of a refused signature: its signer where known, the file a
    mismatch names."""
    found = {"signer": refused.signer, "file": refused.file}
    return {k: v for k, v in found.items() if v is not None}


def _kept(tenant: str, row: Rejection) -> KeptRejection:
    return KeptRejection(
        row.id,
        tenant,
        row.at,
        row.name,
        row.code,
        row.program_sha256,
        row.params_sha256,
        tuple(json.loads(row.diagnostics)),
    )
