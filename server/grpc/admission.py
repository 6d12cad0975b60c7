"""Who calls and with which model, over gRPC: the REST dependencies' steps (server/http/deps.py)
with the same services, limits and errors, reading the call's metadata instead of headers.

The caller's key is `authorization: Bearer <key>` metadata; every call with a tenant key takes
a token from the tenant's bucket (RATE_LIMITED), a suspended tenant is refused; ModelInfer
holds one of the tenant's concurrent slots (TOO_MANY_CONCURRENT, or OVERLOADED when the
server's total is reached). Another tenant's model is NOT_FOUND, like a missing one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

# the threads REST's dependencies read the database in (anyio's limiter, shared by both)
from starlette.concurrency import run_in_threadpool

from server.errors import BadRequest, TenantSuspended, TooManyRequests, Unauthorized
from server.services.limits import Limits
from server.services.metrics import Metrics
from server.services.models import ModelService
from server.services.tenants import TenantService
from server.services.types import LoadedModel, Principal


async def authenticate(state: Any, metadata: Mapping[str, str]) -> Principal:
    """The caller of a call with this metadata; Unauthorized without a valid key."""
    scheme, _, key = metadata.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("missing or malformed authorization: Bearer <key> metadata")
    key = key.strip()
    tenants: TenantService = state.tenants
    principal = tenants.cached_principal(key)
    if principal is None:  # not cached: a database read, off the event loop
        principal = await run_in_threadpool(tenants.authenticate, key)
    if not principal.is_admin:
        if principal.tenant_id in state.policies.suspended:
            raise TenantSuspended("this tenant is suspended by an operator")
        limits: Limits = state.limits
        try:
            limits.rate.take(principal.tenant_id)
        except TooManyRequests as throttled:
            _count_throttle(state, principal, throttled)
            raise
    return principal


async def resolve(state: Any, principal: Principal, name: str, version: str) -> LoadedModel:
    """The caller's model `name` at `version` ("" for the latest ready one)."""
    number = _version(version)
    models: ModelService = state.models
    loaded = models.cached_resolve(principal, name, number)
    if loaded is None:  # not cached: a database read, maybe a compile
        loaded = await run_in_threadpool(models.resolve, principal, name, number)
    return loaded


@asynccontextmanager
async def inference_slot(state: Any, principal: Principal) -> AsyncIterator[None]:
    """One of the tenant's concurrent inference slots, held for the block."""
    if principal.is_admin:  # the admin has no models: resolving one is PERMISSION_DENIED
        yield
        return
    concurrency = state.limits.concurrency
    try:
        concurrency.acquire(principal.tenant_id)
    except TooManyRequests as throttled:
        _count_throttle(state, principal, throttled)
        raise
    try:
        yield
    finally:
        concurrency.release(principal.tenant_id)


def _count_throttle(state: Any, principal: Principal, throttled: TooManyRequests) -> None:
    metrics: Metrics = state.metrics
    metrics.throttle(principal.tenant_id, getattr(throttled, "reason", "other"))


def _version(raw: str) -> int | None:
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise BadRequest(f"model version must be a positive integer, got {raw[:40]!r}")
    return int(raw)
