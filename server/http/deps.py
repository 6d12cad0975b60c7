"""FastAPI dependencies: settings, services and the caller, each derived from the request.

NOTE: all `async def`: FastAPI runs a plain `def` dependency in its threadpool, one thread hop
(0.15-0.4 ms measured here) each. These only read app state and in-memory caches; the reads behind
a cache miss (key check and model lookup from the database, a compile) go to the threadpool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from server.errors import BadRequest, Forbidden, TenantSuspended, TooManyRequests, Unauthorized
from server.http import request_state
from server.services.limits import Limits
from server.services.metrics import Metrics
from server.services.models import ModelService
from server.services.tenants import TenantService
from server.services.types import LoadedModel, Principal
from server.settings import Settings


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_models(request: Request) -> ModelService:
    models: ModelService = request.app.state.models
    return models


ModelsDep = Annotated[ModelService, Depends(get_models)]


async def get_tenants(request: Request) -> TenantService:
    tenants: TenantService = request.app.state.tenants
    return tenants


TenantsDep = Annotated[TenantService, Depends(get_tenants)]


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


MetricsDep = Annotated[Metrics, Depends(get_metrics)]


async def get_principal(request: Request, tenants: TenantsDep) -> Principal:
    """The caller, from `Authorization: Bearer <key>` only; anything else is 401.

    Every request made with a tenant key takes a token from that tenant's bucket (429 when it
    is empty); admin keys are not rate limited.
    """
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("missing or malformed Authorization: Bearer <key> header")
    key = key.strip()
    principal = tenants.cached_principal(key)
    if principal is None:  # not cached: a database read
        principal = await run_in_threadpool(tenants.authenticate, key)
    request_state.note(request.scope, request_state.PRINCIPAL, principal)  # a metrics label
    if not principal.is_admin:
        if principal.tenant_id in request.app.state.policies.suspended:  # a frozenset read
            raise TenantSuspended("this tenant is suspended by an operator")
        limits: Limits = request.app.state.limits
        try:
            limits.rate.take(principal.tenant_id)
        except TooManyRequests as throttled:
            _count_throttle(request, principal, throttled)
            raise
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this route needs an admin key")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]


async def get_loaded_model(
    request: Request, name: str, principal: PrincipalDep, models: ModelsDep
) -> LoadedModel:
    """The model `{name}` of the caller's tenant at `{version}` if the path has one, else the
    latest ready version. Another tenant's model is NotFound, like a missing one."""
    version = _version(request.path_params.get("version"))
    loaded = models.cached_resolve(principal, name, version)
    if loaded is None:  # not cached: a database read, maybe a compile
        loaded = await run_in_threadpool(models.resolve, principal, name, version)
    request_state.note(request.scope, request_state.MODEL, loaded)  # a metrics label
    return loaded


LoadedModelDep = Annotated[LoadedModel, Depends(get_loaded_model)]


def take_inference_slot(request: Request, principal: Principal) -> Callable[[], None]:
    """Takes one of the tenant's concurrent inference slots (429 TOO_MANY_CONCURRENT when
    none is free); returns what gives it back, once (the infer endpoint holds it from reading
    the body until the answer is sent)."""
    if principal.is_admin:  # the admin has no models to run: resolving them is 403
        return _nothing
    concurrency = request.app.state.limits.concurrency
    tenant_id = principal.tenant_id
    try:
        concurrency.acquire(tenant_id)
    except TooManyRequests as throttled:
        _count_throttle(request, principal, throttled)
        raise
    held = [True]

    def release() -> None:
        if held:
            held.clear()
            concurrency.release(tenant_id)

    return release


def _nothing() -> None:
    pass


# NOTE: a plain call in an `except`, not a context manager around the take: on the infer path
# a @contextmanager's generator costs more than the token bucket it guards.
def _count_throttle(request: Request, principal: Principal, throttled: TooManyRequests) -> None:
    """Counts a 429 in the metrics, by its reason."""
    metrics: Metrics = request.app.state.metrics
    metrics.throttle(principal.tenant_id, getattr(throttled, "reason", "other"))


def _version(raw: str | None) -> int | None:
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:  # "²" is a digit, not a number
        raise BadRequest(f"model version must be a positive integer, got {raw!r}")
    return int(raw)
