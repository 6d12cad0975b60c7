"""FastAPI dependencies of the operator's side: the operator services, the acting caller for
the audit log, and the acting operator (whose role the operator service checks per change)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, Request

from server.http.deps import AdminDep, PrincipalDep
from server.services.admins import AdminService
from server.services.audit import Actor, AuditService
from server.services.metrics import TenantNames
from server.services.operators import Operator, OperatorService
from server.services.policies import PolicyService
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


async def get_operator(request: Request, principal: AdminDep) -> Operator:
    """The operator acting (an admin or viewer key; a tenant key is 403 before this), for the
    operator service, which checks the role of each change itself."""
    client = request.client.host if request.client else None
    return Operator(principal, request_id(request), client)


async def get_operators(request: Request) -> OperatorService:
    operators: OperatorService = request.app.state.operators
    return operators


OperatorDep = Annotated[Operator, Depends(get_operator)]
OperatorsDep = Annotated[OperatorService, Depends(get_operators)]
