"""create_app(settings): the FastAPI application; nothing is created at import time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from server import errors, paths
from server.body_limit import BodyLimit
from server.console import app as console
from server.db.engine import open_database
from server.metrics import InferenceMetrics
from server.routes import admin, admin_operator, health, inference, metrics, models, openapi
from server.services.admins import AdminService
from server.services.audit import AuditService
from server.services.limits import Limits
from server.services.metrics import Metrics, TenantNames
from server.services.models import ModelService
from server.services.policies import PolicyService
from server.services.tenants import TenantService, announce_admin_token
from server.services.uploads import UploadService
from server.settings import Settings
from server.storage.artifacts import Artifacts

log = logging.getLogger("graphgate.server")


def start_services(app: FastAPI, settings: Settings) -> None:
    """Opens the data directory: migrates the database, sweeps temp files, ensures an admin key."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    sessions = open_database(settings.data_dir / "graphgate.db")
    artifacts = Artifacts(settings.data_dir / "artifacts")
    if swept := artifacts.sweep():
        log.warning("removed %d temporary files left by an interrupted write", swept)
    tenants = TenantService(sessions, cache_ttl_s=settings.auth_cache_ttl_s)
    token = settings.admin_token.get_secret_value() if settings.admin_token else None
    if (created := tenants.ensure_admin(token)) is not None:
        announce_admin_token(created)
    app.state.tenants = tenants
    app.state.tenant_names = TenantNames(sessions)
    app.state.metrics.bind_tenant_names(app.state.tenant_names)
    app.state.models = ModelService(
        sessions,
        artifacts,
        policy=settings.policy(),
        options=settings.session_options(),
        cache_size=settings.model_cache_size,
        lookup_ttl_s=settings.model_lookup_ttl_s,
        policy_for=lambda tenant_id: app.state.policies.policy_of(tenant_id),
    )
    start_operator_services(app, settings, sessions, artifacts)


def start_operator_services(
    app: FastAPI, settings: Settings, sessions: sessionmaker[Session], artifacts: Artifacts
) -> None:
    """Operators, the audit log, per-tenant rules and the audited uploads (server/services/)."""
    app.state.audit = AuditService(sessions)
    app.state.admins = AdminService(sessions, app.state.tenants, app.state.audit)
    app.state.admins.ensure_root()
    app.state.policies = PolicyService(
        sessions,
        artifacts,
        app.state.models,
        app.state.limits,
        default_policy=settings.policy(),
        default_quota=settings.quota(),
    )
    app.state.uploads = UploadService(
        sessions,
        app.state.models,
        app.state.policies,
        app.state.audit,
        keep=settings.rejections_kept,
    )
    console.start(app.state, sessions, artifacts)


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start_services(app, settings)
        yield

    app = FastAPI(
        title="graphgate", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.settings = settings
    app.state.limits = Limits.build(
        settings.tenant_rate_per_s, settings.tenant_rate_burst, settings.tenant_max_concurrent
    )
    app.state.metrics = Metrics()  # its own registry: apps in one process never collide
    errors.install(app)
    app.add_middleware(
        BodyLimit,
        caps=(
            (paths.UPLOAD_PATHS, settings.max_upload_bytes),
            (paths.V2_INFER_PATHS, settings.max_infer_bytes),
        ),
    )
    app.add_middleware(InferenceMetrics, metrics=app.state.metrics)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(inference.router)
    app.include_router(admin.router)
    app.include_router(admin_operator.router)
    app.include_router(openapi.router)
    app.include_router(metrics.router)
    app.mount(console.PREFIX, console.build(app.state))  # last: the API's routes match first
    return app
