"""FastAPI dependencies: settings, services and the caller, each derived from the request."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from server.services.models import ModelService
from server.services.tenants import TenantService
from server.services.types import BadRequest, Forbidden, LoadedModel, Principal, Unauthorized
from server.settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_models(request: Request) -> ModelService:
    models: ModelService = request.app.state.models
    return models


ModelsDep = Annotated[ModelService, Depends(get_models)]


def get_tenants(request: Request) -> TenantService:
    tenants: TenantService = request.app.state.tenants
    return tenants


TenantsDep = Annotated[TenantService, Depends(get_tenants)]


def get_principal(request: Request, tenants: TenantsDep) -> Principal:
    """The caller, from `Authorization: Bearer <key>` only; anything else is 401."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("missing or malformed Authorization: Bearer <key> header")
    return tenants.authenticate(key.strip())


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this route needs an admin key")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]


def get_loaded_model(
    request: Request, name: str, principal: PrincipalDep, models: ModelsDep
) -> LoadedModel:
    """The model `{name}` of the caller's tenant at `{version}` if the path has one, else the
    latest ready version. Another tenant's model is NotFound, like a missing one."""
    return models.resolve(principal, name, _version(request.path_params.get("version")))


LoadedModelDep = Annotated[LoadedModel, Depends(get_loaded_model)]


def _version(raw: str | None) -> int | None:
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 9:
        raise BadRequest(f"model version must be a positive integer, got {raw!r}")
    return int(raw)
