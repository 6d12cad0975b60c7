"""Admin: a model version's own dynamic batching policy (server/dispatch/batching.py), stored with the
version, so that every replica batches it alike. It applies only to programs the validator
proves batchable; for any other it is stored and has no effect (metadata says so by leaving
`dynamic_batching` out). Only an operator of role admin changes it, audited (the operator
service)."""

from __future__ import annotations

from typing import Any, Self

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, model_validator

from server.http.admin_deps import OperatorDep, OperatorsDep
from server.http.deps import require_admin
from server.http.params import ModelName, TenantName, Version
from server.routes.schemas import ERRORS

router = APIRouter(
    prefix="/v1/admin/models",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=ERRORS,
)

# Bounds that keep one batch within what a worker run may take anyway (the request budgets
# still apply to the concatenated batch); a delay past 1 s is a misconfiguration, not a policy.
MAX_BATCH_ROWS = 1024
MAX_DELAY_US = 1_000_000


class BatchingOverride(BaseModel):
    """Field names as the V2 metadata's `parameters.dynamic_batching` shows them; an unknown
    field is a 400 naming it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_batch_size: int = Field(ge=0, le=MAX_BATCH_ROWS, description="rows; 0 or 1: no batching")
    max_queue_delay_us: int = Field(ge=0, le=MAX_DELAY_US)
    preferred_batch_sizes: list[int] = Field(default_factory=list, max_length=16)

    @model_validator(mode="after")
    def _sizes_fit(self) -> Self:
        sizes = self.preferred_batch_sizes
        if sorted(set(sizes)) != sizes or any(s < 1 or s > self.max_batch_size for s in sizes):
            raise ValueError(
                "expected preferred_batch_sizes distinct, increasing and within "
                f"1..max_batch_size ({self.max_batch_size}), got {sizes}"
            )
        return self


@router.put("/{tenant}/{name}/{version}/batching")
def set_batching(
    tenant: TenantName,
    name: ModelName,
    version: Version,
    body: BatchingOverride,
    operators: OperatorsDep,
    who: OperatorDep,
) -> dict[str, Any]:
    policy = body.model_dump()
    operators.set_batching(who, tenant, name, version, policy)
    return {"tenant": tenant, "name": name, "version": version, "batching": policy}


@router.delete("/{tenant}/{name}/{version}/batching")
def reset_batching(
    tenant: TenantName, name: ModelName, version: Version, operators: OperatorsDep, who: OperatorDep
) -> dict[str, Any]:
    """Back to the server's defaults (settings `batch_*`)."""
    operators.set_batching(who, tenant, name, version, None)
    return {"tenant": tenant, "name": name, "version": version, "batching": None}
