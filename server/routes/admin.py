"""Admin REST under /v1/admin: tenants and their keys, quarantine (operator keys only; every
change goes through the operator service, which checks the role and audits it)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, status
from pydantic import BaseModel, ConfigDict, Field

from server.http.admin_deps import OperatorDep, OperatorsDep
from server.http.deps import TenantsDep, require_admin
from server.http.params import KeyId, ModelName, TenantName, Version
from server.routes.json import iso
from server.routes.schemas import ERRORS
from server.services.types import KeyInfo, TenantInfo

router = APIRouter(
    prefix="/v1/admin", tags=["admin"], dependencies=[Depends(require_admin)], responses=ERRORS
)


class NewTenant(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64)


@router.post("/tenants", status_code=status.HTTP_201_CREATED)
def create_tenant(body: NewTenant, operators: OperatorsDep, who: OperatorDep) -> dict[str, Any]:
    return asdict(operators.create_tenant(who, body.name))


@router.get("/tenants")
def list_tenants(tenants: TenantsDep) -> dict[str, Any]:
    return {"tenants": [_tenant_json(t) for t in tenants.list_tenants()]}


@router.post("/tenants/{name}/keys", status_code=status.HTTP_201_CREATED)
def create_key(name: TenantName, operators: OperatorsDep, who: OperatorDep) -> dict[str, Any]:
    return asdict(operators.create_key(who, name))


@router.delete("/keys/{key_id}")
def revoke_key(key_id: KeyId, operators: OperatorsDep, who: OperatorDep) -> dict[str, Any]:
    return _key_json(operators.revoke_key(who, key_id))


@router.post("/quarantine/{tenant}/{name}/{version}/release")
def release_quarantine(
    tenant: TenantName,
    name: ModelName,
    version: Version,
    operators: OperatorsDep,
    who: OperatorDep,
) -> dict[str, Any]:
    """Lets a model version that crashed its workers run again, in every replica."""
    operators.release(who, tenant, name, version)
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
