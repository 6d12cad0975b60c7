"""Admin REST of the operator's side under /v1/admin: operators, tenant policy and quota,
suspension, the audit log and kept rejections. Viewers read; only admins change."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeAlias

from fastapi import APIRouter, Depends, Query, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, create_model

from server.http.admin_deps import (
    AdminsDep,
    AuditDep,
    OperatorDep,
    OperatorsDep,
    PoliciesDep,
    UploadsDep,
)
from server.http.deps import require_admin
from server.http.params import OperatorName, TenantName
from server.routes.json import iso
from server.routes.schemas import ERRORS
from server.services.admins import AdminInfo
from server.services.audit import MAX_ID, MAX_PAGE, AuditQuery, utc_moment
from server.services.policies import QUOTA_FIELDS, TenantRulesView, quota_json
from server.settings import POLICY_FIELDS as SERVER_POLICY_FIELDS
from server.settings import label_of

router = APIRouter(
    prefix="/v1/admin", tags=["admin"], dependencies=[Depends(require_admin)], responses=ERRORS
)


# -- request and response bodies ---------------------------------------------------------------


class NewAdmin(BaseModel):
    model_config = ConfigDict(extra="forbid")

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


# Policy and quota bodies, made from the one field lists (server/settings.py POLICY_FIELDS,
# the Quota's fields, and the signing fields of server/services/signing_policy.py): each
# field optional, strictly typed; null sends a field back to the server's default; an unknown
# field is a 400 naming it. Bounds are the policy service's.
_STRICT: Final = ConfigDict(extra="forbid", strict=True)
if TYPE_CHECKING:  # models made at run time: to mypy, a model
    PolicyIn: TypeAlias = BaseModel
    QuotaIn: TypeAlias = BaseModel
else:
    PolicyIn = create_model(
        "PolicyIn",
        __config__=_STRICT,
        __doc__="Fields to set; a field set to null goes back to the server's default.",
        allowed_ops=(list[str] | None, Field(default=None, description="op types allowed")),
        **{
            name: (int | None, Field(default=None, description=label_of(name)))
            for name in SERVER_POLICY_FIELDS
        },
        # Signed uploads (server/services/signing_policy.py): checked by the service.
        require_signature=(bool | None, None),
        signing_keys=(
            list[str] | str | None,
            Field(
                default=None, description="PEM public keys: one text with one or more, or a list"
            ),
        ),
        signing_ca=(str | None, Field(default=None, description="a PEM bundle of CA certificates")),
        signing_identities=(
            list[str] | None,
            Field(
                default=None, description="certificate subjects (RFC 4514) or SANs allowed to sign"
            ),
        ),
    )
    QuotaIn = create_model(
        "QuotaIn",
        __config__=_STRICT,
        __doc__="Fields to set; null: back to the server's default; 0 turns one off.",
        **{
            name: (float | None if name == "rate_per_s" else int | None, None)
            for name in QUOTA_FIELDS
        },
    )


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
def create_admin(body: NewAdmin, operators: OperatorsDep, who: OperatorDep) -> IssuedAdminOut:
    issued = operators.create_admin(who, body.name, body.role)
    return IssuedAdminOut(name=issued.name, role=issued.role, key_id=issued.key_id, key=issued.key)


@router.get("/admins")
def list_admins(admins: AdminsDep) -> AdminsOut:
    return AdminsOut(admins=[_admin_out(a) for a in admins.list_admins()])


@router.delete("/admins/{name}")
def revoke_admin(name: OperatorName, operators: OperatorsDep, who: OperatorDep) -> AdminOut:
    return _admin_out(operators.revoke_admin(who, name))


# -- tenant policy, quota, suspension ----------------------------------------------------------


@router.get("/tenants/{name}/policy")
def show_policy(name: TenantName, policies: PoliciesDep) -> RulesOut:
    return _rules_out(policies.show(name))


@router.put("/tenants/{name}/policy")
def set_policy(
    name: TenantName, body: PolicyIn, operators: OperatorsDep, who: OperatorDep
) -> PolicyChangeOut:
    change = operators.set_policy(who, name, body.model_dump(exclude_unset=True))
    rules = _rules_out(change.rules).model_dump()
    return PolicyChangeOut(**rules, blocked=list(change.blocked), unblocked=list(change.unblocked))


@router.get("/tenants/{name}/quota")
def show_quota(name: TenantName, policies: PoliciesDep) -> RulesOut:
    return _rules_out(policies.show(name))


@router.put("/tenants/{name}/quota")
def set_quota(
    name: TenantName, body: QuotaIn, operators: OperatorsDep, who: OperatorDep
) -> RulesOut:
    return _rules_out(operators.set_quota(who, name, body.model_dump(exclude_unset=True)))


@router.post("/tenants/{name}/suspend")
def suspend(name: TenantName, operators: OperatorsDep, who: OperatorDep) -> RulesOut:
    return _rules_out(operators.suspend(who, name, True))


@router.post("/tenants/{name}/resume")
def resume(name: TenantName, operators: OperatorsDep, who: OperatorDep) -> RulesOut:
    return _rules_out(operators.suspend(who, name, False))


@router.get("/tenants/{name}/rejections")
def list_rejections(name: TenantName, uploads: UploadsDep) -> RejectionsOut:
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
    actor: Annotated[
        str | None, Query(max_length=80, description="'admin:<name>' or 'tenant:<name>'")
    ] = None,
    action: Annotated[
        str | None, Query(max_length=32, description="e.g. model.upload, policy.set")
    ] = None,
    tenant: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[datetime | None, Query(description="ISO time, UTC, inclusive")] = None,
    until: Annotated[datetime | None, Query(description="ISO time, UTC, exclusive")] = None,
    cursor: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> AuditQuery:
    return AuditQuery(
        actor,
        action,
        tenant,
        utc_moment("since", since),
        utc_moment("until", until),
        cursor,
        limit,
    )


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
