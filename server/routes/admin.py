"""Admin REST under /v1/admin: tenants and their keys (admin keys only)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, status
from pydantic import BaseModel, Field

from server.http.admin_deps import ActorDep, AuditDep, WriterDep
from server.http.deps import ModelsDep, TenantsDep, require_admin
from server.routes.json import iso
from server.routes.schemas import ERRORS
from server.services.types import KeyInfo, TenantInfo

router = APIRouter(
    prefix="/v1/admin", tags=["admin"], dependencies=[Depends(require_admin)], responses=ERRORS
)


class NewTenant(BaseModel):
    name: str = Field(max_length=64)


@router.post("/tenants", status_code=status.HTTP_201_CREATED)
def create_tenant(
    body: NewTenant, tenants: TenantsDep, _: WriterDep, audit: AuditDep, actor: ActorDep
) -> dict[str, Any]:
    issued = tenants.create_tenant(body.name)
    audit.record(actor, "tenant.create", issued.tenant, tenant=issued.tenant)
    audit.record(actor, "key.create", issued.key_id, tenant=issued.tenant)
    return asdict(issued)


@router.get("/tenants")
def list_tenants(tenants: TenantsDep) -> dict[str, Any]:
    return {"tenants": [_tenant_json(t) for t in tenants.list_tenants()]}


@router.post("/tenants/{name}/keys", status_code=status.HTTP_201_CREATED)
def create_key(
    name: str, tenants: TenantsDep, _: WriterDep, audit: AuditDep, actor: ActorDep
) -> dict[str, Any]:
    issued = tenants.create_key(name)
    audit.record(actor, "key.create", issued.key_id, tenant=issued.tenant)
    return asdict(issued)


@router.delete("/keys/{key_id}")
def revoke_key(
    key_id: str, tenants: TenantsDep, _: WriterDep, audit: AuditDep, actor: ActorDep
) -> dict[str, Any]:
    revoked = tenants.revoke_key(key_id)
    audit.record(actor, "key.revoke", key_id)
    return _key_json(revoked)


@router.post("/quarantine/{tenant}/{name}/{version}/release")
def release_quarantine(
    tenant: str,
    name: str,
    version: int,
    models: ModelsDep,
    _: WriterDep,
    audit: AuditDep,
    actor: ActorDep,
) -> dict[str, Any]:
    """Lets a model version that crashed its workers run again."""
    models.release(tenant, name, version)
    audit.record(actor, "model.release", f"{name}/{version}", tenant=tenant)
    return {"tenant": tenant, "name": name, "version": version, "status": "ready"}


def _tenant_json(tenant: TenantInfo) -> dict[str, Any]:
    keys = [_key_json(key) for key in tenant.keys]
    return {"tenant": tenant.tenant, "created": iso(tenant.created), "keys": keys}


def _key_json(key: KeyInfo) -> dict[str, Any]:
    return {
        "key_id": key.key_id,
        "role": key.role,
        "created": iso(key.created),
        "revoked": iso(key.revoked),
    }
