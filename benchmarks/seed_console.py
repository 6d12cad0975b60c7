"""Seeds a data directory for the console benchmark: tenants, models and versions.

Usage: python benchmarks/seed_console.py DATA_DIR [--tenants 100] [--versions 1000]

Two real uploads (an affine model and a small CNN, validated, lowered and stored by the model
service) give real artifacts and reports; every other version is a database row that points at
the same content-addressed artifacts, as a re-upload of the same files would. Tenants get
`versions // tenants` versions each, spread over models of two versions; one version in ten
is `blocked` and one tenant in ten is suspended, so every status shows on the pages.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.db.engine import open_database  # noqa: E402
from server.db.models import Model, ModelVersion, Tenant, TenantRules, utcnow  # noqa: E402
from server.services.models import ModelService  # noqa: E402
from server.services.tenants import TenantService  # noqa: E402
from server.services.types import Principal  # noqa: E402
from server.settings import Settings  # noqa: E402
from server.storage.artifacts import Artifacts  # noqa: E402
from tests.support.builders import affine, conv  # noqa: E402

ADMIN_TOKEN = "bench-console-admin-token-0123456789abcdef"


def seed(data_dir: Path, tenants: int = 100, versions: int = 1000) -> Settings:
    """Fills `data_dir`; returns the settings to serve it with (admin key ADMIN_TOKEN)."""
    settings = Settings(data_dir=data_dir, admin_token=SecretStr(ADMIN_TOKEN))
    data_dir.mkdir(parents=True, exist_ok=True)
    sessions = open_database(data_dir / "graphgate.db")
    service = TenantService(sessions)
    service.ensure_admin(ADMIN_TOKEN)
    models = ModelService(sessions, Artifacts(data_dir / "artifacts"), policy=settings.policy())
    first = service.create_tenant("tenant-000")
    principal = Principal(_tenant_id(sessions, "tenant-000"), first.key_id, False)
    for name, built in (("affine", affine().built()), ("cnn", conv().built())):
        models.upload(principal, name, built.program, built.params)
    with sessions() as s:
        templates = list(s.query(ModelVersion).order_by(ModelVersion.id))
    per_tenant = versions // tenants
    with sessions.begin() as s:
        # tenant-000 has its two real versions; the rest make the total exactly `versions`
        _versions(s, principal.tenant_id, versions - 2 - per_tenant * (tenants - 1), templates, 0)
        for t in range(1, tenants):
            tenant = Tenant(id=uuid.uuid4().hex, name=f"tenant-{t:03d}")
            s.add(tenant)
            s.flush()  # the tenant row before its models (foreign keys)
            if t % 10 == 0:
                s.add(TenantRules(tenant_id=tenant.id, policy="{}", quota="{}", suspended=utcnow()))
            _versions(s, tenant.id, per_tenant, templates, t)
    return settings


def _versions(s: object, tenant_id: str, count: int, templates: list[ModelVersion], t: int) -> None:
    for m in range(count // 2):
        model = Model(
            id=uuid.uuid4().hex, tenant_id=tenant_id, name=f"model-{m:02d}", next_version=3
        )
        s.add(model)  # type: ignore[attr-defined]
        s.flush()  # type: ignore[attr-defined]
        for v in (1, 2):
            like = templates[(m + v) % len(templates)]
            s.add(  # type: ignore[attr-defined]
                ModelVersion(
                    model_id=model.id,
                    version=v,
                    status="blocked" if (t + m + v) % 10 == 0 else "ready",
                    program_sha256=like.program_sha256,
                    params_sha256=like.params_sha256,
                    onnx_sha256=like.onnx_sha256,
                    report=like.report,
                )
            )


def _tenant_id(sessions: object, name: str) -> str:
    from sqlalchemy import select

    with sessions() as s:  # type: ignore[operator]
        found: str = s.scalar(select(Tenant.id).where(Tenant.name == name))
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--versions", type=int, default=1000)
    args = parser.parse_args()
    seed(args.data_dir, args.tenants, args.versions)
    print(f"seeded {args.data_dir}; admin key {ADMIN_TOKEN}")


if __name__ == "__main__":
    main()
