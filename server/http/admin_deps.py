"""FastAPI dependencies of the operator's side: the operator services, the acting caller for
the audit log, and the write check (a viewer reads every admin route, changes nothing)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, Request

from server.errors import ReadOnlyOperator
from server.http.deps import PrincipalDep, require_admin
from server.services.admins import AdminService
from server.services.audit import Actor, AuditService
from server.services.metrics import TenantNames
from server.services.policies import PolicyService
from server.services.types import Principal
from server.services.uploads import UploadService

REQUEST_ID_HEADER = "x-request-id"


async def get_admins(request: Request) -> AdminService:
    admins: AdminService = request.app.state.admins
    return admins


async def get_policies(request: Request) -> PolicyService:
    policies: PolicyService = request.app.state.policies
    return policies


async def get_audit(request: Request) -> AuditService:
    audit: AuditService = request.app.state.audit
    return audit


async def get_uploads(request: Request) -> UploadService:
    uploads: UploadService = request.app.state.uploads
    return uploads


AdminsDep = Annotated[AdminService, Depends(get_admins)]
PoliciesDep = Annotated[PolicyService, Depends(get_policies)]
AuditDep = Annotated[AuditService, Depends(get_audit)]
UploadsDep = Annotated[UploadService, Depends(get_uploads)]


def request_id(request: Request) -> str:
    """The caller's X-Request-Id when it is a short token, else a fresh one."""
    given = request.headers.get(REQUEST_ID_HEADER, "")
    if 0 < len(given) <= 64 and given.replace("-", "").isalnum():
        return given
    return uuid.uuid4().hex


async def get_actor(request: Request, principal: PrincipalDep) -> Actor:
    """Who acts, for the audit log: the operator's name, or the tenant's name and key id."""
    client = request.client.host if request.client else None
    if principal.is_admin:
        return Actor(principal.key_id, principal.operator, "", request_id(request), client)
    names: TenantNames = request.app.state.tenant_names
    tenant = names(principal.tenant_id)
    return Actor(principal.key_id, "", tenant, request_id(request), client)


ActorDep = Annotated[Actor, Depends(get_actor)]


async def require_writer(principal: Annotated[Principal, Depends(require_admin)]) -> Principal:
    if principal.read_only:
        raise ReadOnlyOperator(
            f"expected an operator of role admin to change this, got viewer {principal.operator!r}"
        )
    return principal


WriterDep = Annotated[Principal, Depends(require_writer)]
