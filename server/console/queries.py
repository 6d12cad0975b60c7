"""What the console's pages show, read in a few aggregate queries (framework-free).

The operator services answer one tenant at a time; a page that lists every tenant or every
model reads them here in bulk instead (a query per table, not per tenant), so a page with
hundreds of tenants and thousands of versions still renders in milliseconds.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import func, select, union
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import ApiKey, ArtifactRef, Model, ModelVersion, Tenant, TenantRules

MODELS_PER_PAGE: Final = 50


@dataclass(frozen=True, slots=True)
class TenantRow:
    name: str
    created: datetime
    suspended: bool
    models: int
    versions: int
    blocked: int
    storage_bytes: int
    active_keys: int


@dataclass(frozen=True, slots=True)
class VersionRow:
    version: int
    status: str
    created: datetime
    op_count: int
    param_bytes: int


@dataclass(frozen=True, slots=True)
class ModelRow:
    tenant: str
    name: str
    versions: tuple[VersionRow, ...]


@dataclass(frozen=True, slots=True)
class ModelsPage:
    rows: tuple[ModelRow, ...]
    page: int
    pages: int
    total: int


@dataclass(frozen=True, slots=True)
class VersionDetail:
    tenant: str
    name: str
    version: int
    status: str
    created: datetime
    program_sha256: str
    params_sha256: str | None
    onnx_sha256: str
    report: dict[str, Any]
    provenance: dict[str, Any] | None = None  # who signed it (Provenance JSON); None: unsigned


class ConsoleQueries:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def tenants(self) -> list[TenantRow]:
        with self._sessions() as s:
            tenants = s.execute(select(Tenant.id, Tenant.name, Tenant.created)).all()
            suspended = set(
                s.scalars(select(TenantRules.tenant_id).where(TenantRules.suspended.is_not(None)))
            )
            models = _counts(s.execute(_count_by_tenant(Model.id)))
            keys = _counts(
                s.execute(
                    select(ApiKey.tenant_id, func.count())
                    .where(ApiKey.revoked.is_(None), ApiKey.tenant_id.is_not(None))
                    .group_by(ApiKey.tenant_id)
                )
            )
            stored = _counts(s.execute(_storage_by_tenant()))
            versions = s.execute(select(Model.tenant_id, ModelVersion.status).join(Model)).all()
        counts: Counter[str] = Counter()
        blocked: Counter[str] = Counter()
        for tenant_id, status in versions:
            counts[tenant_id] += 1
            blocked[tenant_id] += status == "blocked"
        return sorted(
            (
                TenantRow(
                    name,
                    created,
                    tenant_id in suspended,
                    models[tenant_id],
                    counts[tenant_id],
                    blocked[tenant_id],
                    stored[tenant_id],
                    keys[tenant_id],
                )
                for tenant_id, name, created in tenants
            ),
            key=lambda row: row.name,
        )

    def models(self, tenant: str | None, page: int) -> ModelsPage:
        """Every tenant's models (or one tenant's), by tenant and name, a page at a time."""
        with self._sessions() as s:
            names = select(Model.id, Tenant.name, Model.name).join(Tenant)
            if tenant:
                names = names.where(Tenant.name == tenant)
            total = s.scalar(select(func.count()).select_from(names.subquery())) or 0
            pages = max(1, -(-total // MODELS_PER_PAGE))
            page = min(max(page, 1), pages)
            listed = s.execute(
                names.order_by(Tenant.name, Model.name)
                .offset((page - 1) * MODELS_PER_PAGE)
                .limit(MODELS_PER_PAGE)
            ).all()
            ids = [model_id for model_id, _, _ in listed]
            versions = s.execute(
                select(
                    ModelVersion.model_id,
                    ModelVersion.version,
                    ModelVersion.status,
                    ModelVersion.created,
                    ModelVersion.report,
                )
                .where(ModelVersion.model_id.in_(ids))
                .order_by(ModelVersion.version)
            ).all()
        by_model: dict[str, list[VersionRow]] = {}
        for model_id, version, status, created, report in versions:
            figures = json.loads(report)
            by_model.setdefault(model_id, []).append(
                VersionRow(
                    version,
                    status,
                    created,
                    figures.get("op_count", 0),
                    figures.get("params", {}).get("bytes", 0),
                )
            )
        rows = tuple(
            ModelRow(tenant_name, name, tuple(by_model.get(model_id, ())))
            for model_id, tenant_name, name in listed
        )
        return ModelsPage(rows, page, pages, total)

    def version(self, tenant: str, name: str, version: int) -> VersionDetail | None:
        with self._sessions() as s:
            row = s.execute(
                select(ModelVersion)
                .join(Model)
                .join(Tenant)
                .where(Tenant.name == tenant, Model.name == name, ModelVersion.version == version)
            ).scalar_one_or_none()
            if row is None:
                return None
            return VersionDetail(
                tenant,
                name,
                row.version,
                row.status,
                row.created,
                row.program_sha256,
                row.params_sha256,
                row.onnx_sha256,
                json.loads(row.report),
                None if row.provenance is None else json.loads(row.provenance),
            )

    def tenant_id(self, tenant: str) -> str | None:
        with self._sessions() as s:
            found: str | None = s.scalar(select(Tenant.id).where(Tenant.name == tenant))
            return found


def _counts(rows: Any) -> Counter[str]:
    return Counter({str(key): int(count) for key, count in rows})


def _count_by_tenant(column: Any) -> Any:
    return select(Model.tenant_id, func.count(column)).group_by(Model.tenant_id)


def _storage_by_tenant() -> Any:
    """(tenant id, bytes of its distinct artifacts), from the sizes the artifact_refs
    bookkeeping keeps: no store round trip (on S3 a HEAD request an artifact)."""
    digests = (ModelVersion.program_sha256, ModelVersion.params_sha256, ModelVersion.onnx_sha256)
    named = union(
        *(select(Model.tenant_id, digest.label("sha256")).join(ModelVersion) for digest in digests)
    ).subquery()  # an artifact two versions of a tenant name counts once
    return (
        select(named.c.tenant_id, func.sum(ArtifactRef.size_bytes))
        .join(ArtifactRef, ArtifactRef.sha256 == named.c.sha256)
        .group_by(named.c.tenant_id)
    )
