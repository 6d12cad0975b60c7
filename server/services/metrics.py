"""Prometheus metrics of one app: inference requests, failures, latency, uploads, 429s.

Every app owns its CollectorRegistry (never the process-global one), so several apps in one
process do not collide. Label values are bounded: a tenant label is the name of an existing
tenant ("" when the caller is not a tenant), a model label the name of a model that resolved
("" otherwise), and codes come from graphgate's own error and diagnostic tables. No string a
caller sends ever becomes a label value.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import Tenant
from server.errors import ModelRejected
from validator import Diagnostic, Severity

NO_LABEL: Final = ""
# Distinct model labels per tenant in the inference series; past it a tenant's further models
# are counted under OTHER_MODELS, so a tenant cannot grow /metrics without bound.
MAX_MODELS_PER_TENANT: Final = 50
OTHER_MODELS: Final = "_other"
# Seconds; finer than prometheus_client's default at the low end, where small models answer.
LATENCY_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


# The console's latency buckets: 25% apart from 50 us to ~60 s, so a percentile read from them
# is within 25% of the true one (the Prometheus buckets above are too coarse for p50 of a ms).
RING_BOUNDS: Final = tuple(50e-6 * 1.25**i for i in range(64))
RING_MINUTES: Final = 60


@dataclass(frozen=True, slots=True)
class MinutePoint:
    """One minute of V2 inference: its start (epoch seconds), counts and latency percentiles."""

    start: float
    requests: int
    errors: int
    p50_s: float | None
    p99_s: float | None


class _Minute:
    __slots__ = ("buckets", "errors", "minute", "requests")

    def __init__(self, minute: int) -> None:
        self.buckets = [0] * (len(RING_BOUNDS) + 1)
        self.reset(minute)

    def reset(self, minute: int) -> None:
        self.minute = minute
        self.requests = 0
        self.errors = 0
        self.buckets[:] = [0] * len(self.buckets)


class MinuteRing:
    """The last hour of V2 inference per minute, for the console's charts: a fixed ring of
    counters and latency buckets (a few list writes per request, nothing allocated).
    NOTE: written from the event loop only (the metrics middleware), so it takes no lock."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._slots = [_Minute(-1) for _ in range(RING_MINUTES)]

    def record(self, seconds: float, failed: bool) -> None:
        minute = int(self._clock() // 60)
        slot = self._slots[minute % RING_MINUTES]
        if slot.minute != minute:
            slot.reset(minute)
        slot.requests += 1
        slot.errors += failed
        slot.buckets[bisect.bisect_left(RING_BOUNDS, seconds)] += 1

    def last_hour(self) -> list[MinutePoint]:
        """One point per minute, oldest first, ending with the current minute."""
        now = int(self._clock() // 60)
        points = []
        for minute in range(now - RING_MINUTES + 1, now + 1):
            slot = self._slots[minute % RING_MINUTES]
            if slot.minute != minute:
                points.append(MinutePoint(minute * 60.0, 0, 0, None, None))
                continue
            buckets = list(slot.buckets)
            points.append(
                MinutePoint(
                    minute * 60.0,
                    slot.requests,
                    slot.errors,
                    _percentile(buckets, slot.requests, 0.50),
                    _percentile(buckets, slot.requests, 0.99),
                )
            )
        return points


def _percentile(buckets: list[int], total: int, q: float) -> float | None:
    """The upper bound of the bucket holding the q-th request (the last bound past the top)."""
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(buckets):
        seen += count
        if seen >= rank:
            return RING_BOUNDS[min(index, len(RING_BOUNDS) - 1)]
    return RING_BOUNDS[-1]


class TenantNames:
    """Tenant id -> name, cached: names never change and tenants are never renamed."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, tenant_id: str) -> str:
        if not tenant_id:
            return NO_LABEL
        with self._lock:
            if (name := self._names.get(tenant_id)) is not None:
                return name
        with self._sessions() as s:
            tenant = s.get(Tenant, tenant_id)
            name = NO_LABEL if tenant is None else tenant.name
        if name:
            with self._lock:
                self._names[tenant_id] = name
        return name


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.minutes = MinuteRing()  # the console's last hour
        self._tenant_names: TenantNames | None = None
        # (tenant label, model label) -> the label values of each series it has, per metric:
        # what `forget_model` removes (prometheus_client removes series by full label values).
        self._series: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        self._models_of: dict[str, set[str]] = {}  # tenant label -> its model labels
        self._series_lock = threading.Lock()
        self._forget_hooks: list[Callable[[str, str, int | None], None]] = []
        r = self.registry
        self.requests = Counter(
            "graphgate_inference_requests",
            "V2 inference requests by tenant, model, protocol (json, binary or grpc) and status "
            "(HTTP, or the gRPC status name).",
            ["tenant", "model", "protocol", "status"],
            registry=r,
        )
        self.failures = Counter(
            "graphgate_inference_failures",
            "V2 inference requests answered with an error, by protocol and error code.",
            ["tenant", "model", "protocol", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "graphgate_inference_latency_seconds",
            "Time from the request's arrival to the end of its response, every outcome.",
            ["tenant", "model", "protocol"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.uploads = Counter(
            "graphgate_model_uploads",
            "Model uploads by outcome: accepted, or rejected by the validator or the gate.",
            ["tenant", "outcome"],
            registry=r,
        )
        self.upload_rejections = Counter(
            "graphgate_model_upload_rejections",
            "Rejected uploads by diagnostic code: one per distinct code in a rejection.",
            ["tenant", "code"],
            registry=r,
        )
        self.throttled = Counter(
            "graphgate_throttled_requests",
            "Requests answered 429, by reason: rate or concurrency.",
            ["tenant", "reason"],
            registry=r,
        )

        self.provider = Gauge(
            "graphgate_execution_provider",
            "1 for the onnxruntime execution provider and device the workers run on.",
            ["provider", "device"],
            registry=r,
        )

    def set_provider(self, provider: str, device: str) -> None:
        """Called at start-up: where sessions run (CUDA only when its libraries load)."""
        self.provider.clear()
        self.provider.labels(provider, device).set(1)

    def bind_tenant_names(self, names: TenantNames) -> None:
        """Called at start-up, once the database is open."""
        self._tenant_names = names

    def tenant_label(self, tenant_id: str) -> str:
        return NO_LABEL if self._tenant_names is None else self._tenant_names(tenant_id)

    # -- recording -------------------------------------------------------------------------

    def inference(
        self,
        tenant_id: str,
        model: str,
        *,
        protocol: str,
        status: str,
        code: str | None,
        seconds: float,
    ) -> None:
        """One finished V2 inference request over `protocol` (json, binary: REST; grpc); `code`
        is the error code when it failed, None when it succeeded."""
        tenant = self.tenant_label(tenant_id)
        model = self._model_label(tenant, model)
        self.requests.labels(tenant, model, protocol, status).inc()
        if code is not None:
            self.failures.labels(tenant, model, protocol, code).inc()
        self.latency.labels(tenant, model, protocol).observe(seconds)
        self.minutes.record(seconds, code is not None)
        # Each series this model has, kept so that deleting the model removes them all.
        series = {("requests", protocol, status), ("latency", protocol)}
        if code is not None:
            series.add(("failures", protocol, code))
        if not series <= self._seen(tenant, model):
            with self._series_lock:
                self._series.setdefault((tenant, model), set()).update(series)

    def _seen(self, tenant: str, model: str) -> set[tuple[str, ...]]:
        return self._series.get((tenant, model), set())

    def _model_label(self, tenant: str, model: str) -> str:
        """`model`, or OTHER_MODELS past the tenant's MAX_MODELS_PER_TENANT labels."""
        models = self._models_of.get(tenant)
        if models is not None and model in models:
            return model
        with self._series_lock:
            models = self._models_of.setdefault(tenant, set())
            if model in models or len(models) < MAX_MODELS_PER_TENANT:
                models.add(model)
                return model
        return OTHER_MODELS

    def on_forget(self, hook: Callable[[str, str, int | None], None]) -> None:
        """Also called by `forget_model` (the batch-size series, kept by the batchers)."""
        self._forget_hooks.append(hook)

    def forget_model(self, tenant_id: str, name: str, version: int | None) -> None:
        """A model (`version` None) or one version of it was deleted: its series go (the
        inference series are per model, so they go with the model's last version)."""
        for hook in self._forget_hooks:
            hook(tenant_id, name, version)
        if version is not None:
            return
        tenant = self.tenant_label(tenant_id)
        with self._series_lock:
            seen = self._series.pop((tenant, name), set())
            self._models_of.get(tenant, set()).discard(name)
        metrics: dict[str, Counter | Histogram] = {
            "requests": self.requests,
            "failures": self.failures,
            "latency": self.latency,
        }
        for kind, *labels in seen:
            _remove(metrics[kind], tenant, name, *labels)

    def throttle(self, tenant_id: str, reason: str) -> None:
        self.throttled.labels(self.tenant_label(tenant_id), reason).inc()

    @contextmanager
    def upload(self, tenant_id: str) -> Iterator[None]:
        """Counts the upload in its block: accepted when it returns, rejected (with each
        distinct diagnostic code) on ModelRejected. Other errors (auth, names) are no upload."""
        tenant = self.tenant_label(tenant_id)
        try:
            yield
        except ModelRejected as rejected:
            self.uploads.labels(tenant, "rejected").inc()
            for code in _distinct_codes(rejected.diagnostics):
                self.upload_rejections.labels(tenant, code).inc()
            raise
        self.uploads.labels(tenant, "accepted").inc()

    # -- exposition ------------------------------------------------------------------------

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text format of every metric, and its Content-Type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _remove(metric: Counter | Histogram, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # never recorded (or removed already)
        metric.remove(*labels)


def _distinct_codes(diagnostics: Iterable[Diagnostic]) -> list[str]:
    codes = {str(d.code) for d in diagnostics if d.severity == Severity.ERROR}
    return sorted(codes)
