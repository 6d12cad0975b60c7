"""Admin REST of the operator's side under /v1/admin: operators, tenant policy and quota,
suspension, the audit log and kept rejections. Viewers read; only admins change."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from server.http.admin_deps import ActorDep, AdminsDep, AuditDep, PoliciesDep, UploadsDep, WriterDep
from server.http.deps import require_admin
from server.routes.json import iso
from server.routes.schemas import ERRORS
from server.services.admins import AdminInfo
from server.services.audit import AuditQuery
from server.services.policies import TenantRulesView, quota_json

router = APIRouter(
    prefix="/v1/admin", tags=["admin"], dependencies=[Depends(require_admin)], responses=ERRORS
)


# -- request and response bodies ---------------------------------------------------------------


class NewAdmin(BaseModel):
    name: str = Field(max_length=64)
    role: str = Field(default="viewer", description="admin or viewer")


class IssuedAdminOut(BaseModel):
    name: str
    role: str
    key_id: str
    key: str = Field(description="shown in this answer and never again")


class AdminOut(BaseModel):
    name: str
    role: str
    created: str | None
    revoked: str | None
    key_ids: list[str]


class AdminsOut(BaseModel):
    admins: list[AdminOut]


class PolicyIn(BaseModel):
    """Fields to set; a field set to null goes back to the server's default."""

    allowed_ops: list[str] | None = None
    max_batch: int | None = None
    max_params_bytes: int | None = None
    max_flops_per_sample: int | None = None
    max_activation_bytes_per_sample: int | None = None
    max_tensor_bytes: int | None = None
    max_loop_trips: int | None = None
    max_ops: int | None = None
    # Signed uploads (server/services/signing_policy.py): checked by the service, each its code.
    require_signature: bool | None = None
    signing_keys: list[str] | str | None = Field(
        default=None, description="PEM public keys: one text with one or more, or a list"
    )
    signing_ca: str | None = Field(default=None, description="a PEM bundle of CA certificates")
    signing_identities: list[str] | None = Field(
        default=None, description="certificate subjects (RFC 4514) or SANs allowed to sign"
    )


class QuotaIn(BaseModel):
    """Fields to set; a field set to null goes back to the server's default; 0 turns one off."""

    rate_per_s: float | None = None
    burst: int | None = None
    max_concurrent: int | None = None
    max_concurrent_uploads: int | None = None
    max_storage_bytes: int | None = None
    max_models: int | None = None
    max_versions: int | None = None


class RulesOut(BaseModel):
    tenant: str
    policy: dict[str, Any]
    quota: dict[str, Any]
    policy_overrides: dict[str, Any]
    quota_overrides: dict[str, Any]
    suspended: str | None


class PolicyChangeOut(RulesOut):
    blocked: list[str] = Field(description="versions ('name/version') the change blocked")
    unblocked: list[str] = Field(description="versions the change unblocked")


class AuditEntryOut(BaseModel):
    id: int
    at: str
    actor: str
    key_id: str | None
    tenant: str | None
    action: str
    target: str | None
    outcome: str
    detail: dict[str, Any]
    request_id: str | None
    client: str | None


class AuditPageOut(BaseModel):
    entries: list[AuditEntryOut]
    next_cursor: int | None = Field(description="pass as `cursor` for the next page")


class RejectionOut(BaseModel):
    id: int
    at: str | None
    name: str
    code: str
    program_sha256: str
    params_sha256: str | None
    diagnostics: list[dict[str, Any]]


class RejectionsOut(BaseModel):
    tenant: str
    rejections: list[RejectionOut]


# -- operators ---------------------------------------------------------------------------------


@router.post("/admins", status_code=status.HTTP_201_CREATED)
def create_admin(
    body: NewAdmin, _: WriterDep, admins: AdminsDep, audit: AuditDep, actor: ActorDep
) -> IssuedAdminOut:
    issued = admins.create(body.name, body.role)
    audit.record(actor, "admin.create", issued.name, detail={"role": issued.role})
    return IssuedAdminOut(name=issued.name, role=issued.role, key_id=issued.key_id, key=issued.key)


@router.get("/admins")
def list_admins(admins: AdminsDep) -> AdminsOut:
    return AdminsOut(admins=[_admin_out(a) for a in admins.list_admins()])


@router.delete("/admins/{name}")
def revoke_admin(
    name: str, _: WriterDep, admins: AdminsDep, audit: AuditDep, actor: ActorDep
) -> AdminOut:
    revoked = admins.revoke(name)
    audit.record(actor, "admin.revoke", name)
    return _admin_out(revoked)


# -- tenant policy, quota, suspension ----------------------------------------------------------


@router.get("/tenants/{name}/policy")
def show_policy(name: str, policies: PoliciesDep) -> RulesOut:
    return _rules_out(policies.show(name))


@router.put("/tenants/{name}/policy")
def set_policy(
    name: str,
    body: PolicyIn,
    _: WriterDep,
    policies: PoliciesDep,
    audit: AuditDep,
    actor: ActorDep,
) -> PolicyChangeOut:
    changes = body.model_dump(exclude_unset=True)
    change = policies.set_policy(name, changes)
    audit.record(actor, "policy.set", name, tenant=name, detail={"changes": changes})
    for label in change.blocked:
        audit.record(actor, "model.block", label, tenant=name)
    for label in change.unblocked:
        audit.record(actor, "model.unblock", label, tenant=name)
    rules = _rules_out(change.rules).model_dump()
    return PolicyChangeOut(**rules, blocked=list(change.blocked), unblocked=list(change.unblocked))


@router.get("/tenants/{name}/quota")
def show_quota(name: str, policies: PoliciesDep) -> RulesOut:
    return _rules_out(policies.show(name))


@router.put("/tenants/{name}/quota")
def set_quota(
    name: str, body: QuotaIn, _: WriterDep, policies: PoliciesDep, audit: AuditDep, actor: ActorDep
) -> RulesOut:
    changes = body.model_dump(exclude_unset=True)
    rules = policies.set_quota(name, changes)
    audit.record(actor, "quota.set", name, tenant=name, detail={"changes": changes})
    return _rules_out(rules)


@router.post("/tenants/{name}/suspend")
def suspend(
    name: str, _: WriterDep, policies: PoliciesDep, audit: AuditDep, actor: ActorDep
) -> RulesOut:
    rules = policies.suspend(name, True)
    audit.record(actor, "tenant.suspend", name, tenant=name)
    return _rules_out(rules)


@router.post("/tenants/{name}/resume")
def resume(
    name: str, _: WriterDep, policies: PoliciesDep, audit: AuditDep, actor: ActorDep
) -> RulesOut:
    rules = policies.suspend(name, False)
    audit.record(actor, "tenant.resume", name, tenant=name)
    return _rules_out(rules)


@router.get("/tenants/{name}/rejections")
def list_rejections(name: str, uploads: UploadsDep) -> RejectionsOut:
    kept = uploads.rejections(name)
    return RejectionsOut(
        tenant=name,
        rejections=[
            RejectionOut(
                id=r.id,
                at=iso(r.at),
                name=r.name,
                code=r.code,
                program_sha256=r.program_sha256,
                params_sha256=r.params_sha256,
                diagnostics=list(r.diagnostics),
            )
            for r in kept
        ],
    )


# -- the audit log -----------------------------------------------------------------------------


def audit_query(
    actor: Annotated[str | None, Query(description="'admin:<name>' or 'tenant:<name>'")] = None,
    action: Annotated[str | None, Query(description="e.g. model.upload, policy.set")] = None,
    tenant: str | None = None,
    since: Annotated[datetime | None, Query(description="ISO time, UTC, inclusive")] = None,
    until: Annotated[datetime | None, Query(description="ISO time, UTC, exclusive")] = None,
    cursor: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> AuditQuery:
    return AuditQuery(actor, action, tenant, _naive(since), _naive(until), cursor, limit)


AuditQueryDep = Annotated[AuditQuery, Depends(audit_query)]


@router.get("/audit")
def list_audit(query: AuditQueryDep, audit: AuditDep) -> AuditPageOut:
    page = audit.page(query)
    entries = [AuditEntryOut(**e.to_json()) for e in page.entries]
    return AuditPageOut(entries=entries, next_cursor=page.next_cursor)


@router.get("/audit.jsonl", response_class=StreamingResponse)
def export_audit(query: AuditQueryDep, audit: AuditDep) -> StreamingResponse:
    """Every matching entry, newest first, one JSON document a line."""
    return StreamingResponse(audit.export_jsonl(query), media_type="application/x-ndjson")


def _naive(moment: datetime | None) -> datetime | None:
    """The database holds naive UTC: an aware time is converted, a naive one taken as UTC."""
    if moment is None or moment.tzinfo is None:
        return moment
    return (moment - moment.utcoffset()).replace(tzinfo=None)  # type: ignore[operator]


def _admin_out(admin: AdminInfo) -> AdminOut:
    return AdminOut(
        name=admin.name,
        role=admin.role,
        created=iso(admin.created),
        revoked=iso(admin.revoked),
        key_ids=list(admin.key_ids),
    )


def _rules_out(rules: TenantRulesView) -> RulesOut:
    return RulesOut(
        tenant=rules.tenant,
        policy=rules.policy_json(),
        quota=quota_json(rules.quota),
        policy_overrides=dict(rules.policy_overrides),
        quota_overrides=dict(rules.quota_overrides),
        suspended=iso(rules.suspended),
    )
