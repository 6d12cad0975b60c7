"""create_app(settings): the FastAPI application; nothing is created at import time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Final

from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Receive, Scope, Send

from executor import say_device_once
from server import gpu
from server.console import app as console
from server.db.engine import DbPoolSettings, open_database
from server.dispatch import PoolSettings, WorkerPool
from server.dispatch.batching import Batchers, BatchPolicy
from server.grpc import server as grpc_server
from server.http import errors, paths
from server.http.body_limit import BodyLimit
from server.http.fast_path import InferFastPath
from server.http.metrics import BatchSizeCollector, InferenceMetrics
from server.routes import (
    admin,
    admin_operator,
    batching,
    health,
    inference,
    metrics,
    models,
    openapi,
)
from server.services.admins import AdminService
from server.services.audit import AuditService
from server.services.inference import Dispatch, budget_of
from server.services.invalidation import Bus, Event, LocalBus
from server.services.limits import CompileQueue, Limits, compile_threads
from server.services.metrics import Metrics, TenantNames
from server.services.models import ModelService
from server.services.operators import OperatorService, forget_series
from server.services.policies import PolicyService, Quota
from server.services.quarantine import DbQuarantine
from server.services.tenants import TenantService, announce_admin_token
from server.services.uploads import UploadService
from server.settings import Settings
from server.storage import ArtifactStore, open_artifacts
from server.storage.spool import Spool

log = logging.getLogger("graphgate.server")
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]
# A limit check on the hot path waits at most this long for Redis, then falls back to the
# process's own limiter (server/services/limits_redis.py).
REDIS_TIMEOUT_S: Final = 0.5
# Threads that decode big V2 bodies and wait for unbatched worker runs (server/services/
# inference.py): as many as anyio's default thread limiter, which they used before.
INFER_THREADS: Final = 40


def start_services(app: FastAPI, settings: Settings) -> None:
    """Opens the data directory: migrates the database, sweeps temp files, ensures an admin key."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    say_device_once(settings.use_cuda)  # the workers' sessions run there; they say nothing
    app.state.metrics.set_provider(*gpu.provider_label(settings.use_cuda, device_id=0))
    sessions = open_database(database_location(settings), pool_settings(settings))
    artifacts = open_artifacts(settings.artifacts_url, settings.data_dir)
    if swept := artifacts.sweep():
        log.warning("removed %d temporary files left by an interrupted write", swept)
    # Beside the artifacts (one file system: a stored upload is a link, not a copy).
    app.state.spool = spool = Spool(settings.data_dir / "spool")
    if swept := spool.sweep(older_than_s=settings.artifact_gc_grace_s):
        log.warning("removed %d spool files left by an interrupted upload", swept)
    bus: Bus = app.state.bus
    tenants = TenantService(sessions, cache_ttl_s=settings.auth_cache_ttl_s, publish=bus.publish)
    token = settings.admin_token.get_secret_value() if settings.admin_token else None
    if (created := tenants.ensure_admin(token)) is not None:
        announce_admin_token(created)
    app.state.tenants = tenants
    app.state.tenant_names = TenantNames(sessions)
    app.state.metrics.bind_tenant_names(app.state.tenant_names)
    app.state.models = ModelService(
        sessions,
        artifacts,
        pool=app.state.workers,
        policy=settings.policy(),
        options=settings.session_options(),
        cache_size=settings.model_cache_size,
        lookup_ttl_s=settings.model_lookup_ttl_s,
        storage_quota_for=lambda tenant_id: (
            app.state.policies.quota_of(tenant_id).max_storage_bytes
        ),
        publish=bus.publish,
        policy_for=lambda tenant_id: app.state.policies.policy_of(tenant_id),
        rules_for_update=lambda s, tenant_id: app.state.policies.rules_for_update(s, tenant_id),
        compile_queue=app.state.limits.compiles.run_blocking,
        spool=spool,
    )
    if orphans := app.state.models.sweep_artifacts(settings.artifact_gc_grace_s):
        log.warning("removed %d artifacts no model version names (a killed upload's)", orphans)
    start_operator_services(app, settings, sessions, artifacts)
    bus.subscribe(_invalidator(tenants, app.state.models, app.state.policies, app.state.quarantine))


def start_operator_services(
    app: FastAPI, settings: Settings, sessions: sessionmaker[Session], artifacts: ArtifactStore
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
        default_quota=Quota.from_settings(settings),
        publish=app.state.bus.publish,
    )
    metrics: Metrics = app.state.metrics
    metrics.on_forget(lambda *label: app.state.batchers.sizes.forget(*label))
    models: ModelService = app.state.models
    app.state.uploads = UploadService(
        sessions,
        models,
        app.state.policies,
        app.state.audit,
        keep=settings.rejections_kept,
        on_delete=lambda *label: forget_series(metrics, models, *label),
    )
    # The pool's crash count and quarantine, in the database (every replica, every restart).
    app.state.quarantine = DbQuarantine(
        sessions,
        settings.quarantine_crashes,
        settings.quarantine_window_s,
        on_quarantine=models.after_admin_write,
    )
    app.state.workers.quarantine = app.state.quarantine
    app.state.operators = OperatorService(
        sessions,
        tenants=app.state.tenants,
        admins=app.state.admins,
        policies=app.state.policies,
        models=models,
        audit=app.state.audit,
        quarantine=app.state.quarantine,
        metrics=metrics,
    )
    console.start(app.state, sessions)


def database_location(settings: Settings) -> Path | str:
    """The PostgreSQL URL when one is set, else the SQLite file in the data directory."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    return settings.data_dir / "graphgate.db"


def pool_settings(settings: Settings) -> DbPoolSettings:
    return DbPoolSettings(
        settings.db_pool_size, settings.db_max_overflow, settings.db_pool_timeout_s
    )


def _invalidator(
    tenants: TenantService, models: ModelService, policies: PolicyService, quarantine: DbQuarantine
) -> Callable[[Event], None]:
    """What another replica's write (a bus message) drops from this process's caches."""

    def drop(event: Event) -> None:
        kind = event.get("kind")
        if kind in ("keys", "all"):
            tenants.drop_cached()
        if kind == "model":
            models.drop_lookups(event.get("tenant", ""), event.get("name", ""))
            quarantine.reload()  # another replica may have quarantined or released it
        if kind == "policy":
            policies.reload(event.get("tenant", ""))
        if kind == "all":
            policies.reload()  # drops every lookup too

    return drop


def shared_state(settings: Settings, local: Limits) -> tuple[Limits, Bus]:
    """`local` limits and no bus, or (with GRAPHGATE_REDIS_URL) both through Redis."""
    if settings.redis_url is None:
        return local, LocalBus()
    import redis

    from server.services.invalidation import RedisBus
    from server.services.limits_redis import redis_limits

    client = redis.Redis.from_url(
        settings.redis_url.get_secret_value(),
        socket_timeout=REDIS_TIMEOUT_S,
        socket_connect_timeout=REDIS_TIMEOUT_S,
    )
    return redis_limits(client, local), RedisBus(client)


def with_workers(lifespan: Lifespan, settings: Settings) -> Lifespan:
    """`lifespan` inside the worker pool's: the workers start before the services (which
    compile in them) and stop after."""

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        app.state.workers = WorkerPool(PoolSettings.from_settings(settings))
        app.state.workers.start()
        # Batching happens before dispatch: at most one batch in flight per worker.
        app.state.batchers = Batchers(
            BatchPolicy.from_settings(settings),
            slots=settings.workers,
            max_run_s=settings.batch_max_run_ms / 1e3,
        )
        app.state.infer_threads = ThreadPoolExecutor(INFER_THREADS, thread_name_prefix="infer")
        app.state.dispatch = Dispatch(
            app.state.infer_threads,
            lambda: app.state.batchers,
            max_body_bytes=settings.max_infer_bytes,
            timeout_s=settings.infer_timeout_s,
            budget_of=lambda tenant_id: budget_of(app.state.policies.quota_of(tenant_id)),
        )
        try:
            async with lifespan(app):
                yield
        finally:
            app.state.batchers.close()
            app.state.infer_threads.shutdown(wait=False, cancel_futures=True)
            app.state.workers.stop()

    return run


class GraphgateApp(FastAPI):
    """FastAPI with the V2 infer endpoint's fast path outermost (server/http/fast_path.py)."""

    def build_middleware_stack(self) -> ASGIApp:
        return InferFastPath(
            super().build_middleware_stack(), inference.infer, self.exception_handlers
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # NOTE: an infer request goes straight to the fast path: FastAPI's own __call__ asks
        # per request whether OpenTelemetry was configured (~5% of the loop's time on a tiny
        # model); the infer path's metrics are Prometheus's (server/http/metrics.py) either way.
        # Which requests are inferences: the route table's one answer (server/http/paths.py).
        stack = self.middleware_stack
        if (
            isinstance(stack, InferFastPath)
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and not self.root_path
            and (params := paths.INFER.match(scope["path"])) is not None
        ):
            scope["app"] = self
            await stack.infer(scope, receive, send, params)
            return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start_services(app, settings)
        # the gRPC endpoint on this loop, over this app's services (server/grpc/server.py)
        endpoint = app.state.grpc_endpoint = await grpc_server.start(app.state, settings)
        try:
            yield
        finally:
            if endpoint is not None:
                await grpc_server.stop(endpoint, settings.shutdown_grace_s)
            app.state.bus.close()

    app = GraphgateApp(
        title="graphgate",
        lifespan=with_workers(lifespan, settings),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.state.limits = Limits.build(
        settings.tenant_rate_per_s,
        settings.tenant_rate_burst,
        settings.tenant_max_concurrent,
        max_queued_inferences=settings.max_queued_inferences,
        compiles=CompileQueue(
            compile_threads(settings.compile_threads, settings.workers),
            settings.tenant_max_concurrent_uploads,
            settings.max_queued_compiles,
        ),
    )
    app.state.limits, app.state.bus = shared_state(settings, app.state.limits)
    app.state.metrics = Metrics()  # its own registry: apps in one process never collide
    batch_sizes = BatchSizeCollector(app.state, app.state.metrics.tenant_label)
    app.state.metrics.registry.register(batch_sizes)
    errors.install(app)
    app.add_middleware(
        BodyLimit,
        caps=(
            (paths.UPLOADS, settings.max_upload_bytes),
            (paths.INFER, settings.max_infer_bytes),
        ),
    )
    app.add_middleware(InferenceMetrics, metrics=app.state.metrics)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(inference.router)
    app.include_router(admin.router)
    app.include_router(admin_operator.router)
    app.include_router(openapi.router)
    app.include_router(batching.router)
    app.include_router(metrics.router)
    app.mount(console.PREFIX, console.build(app.state))  # last: the API's routes match first
    return app
