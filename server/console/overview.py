"""The overview page's figures: the last hour of inference, top tenants and models, the
execution provider, the loaded sessions and the process (framework-free)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from typing import Final

import prometheus_client

from executor.session import choose_providers
from server.services.metrics import Metrics, MinutePoint
from server.services.models import ModelService

TOP: Final = 5
STARTED: Final = time.time()
# The metrics' `protocol` label, as the overview names it: REST's JSON and binary bodies are HTTP.
PROTOCOLS: Final = {"json": "HTTP", "binary": "HTTP", "grpc": "gRPC"}


@dataclass(frozen=True, slots=True)
class Chart:
    """A server-rendered line chart: SVG polyline points in a 600x120 box, and its scale."""

    title: str
    points: str
    top_label: str
    latest_label: str


@dataclass(frozen=True, slots=True)
class LoadedRow:
    tenant: str
    name: str
    version: int
    provider: str  # "" when no idle worker holds its session (evicted, or workers busy)
    memory_bytes: int  # ONNX weights plus first-run arena growth, summed over the workers
    workers: int  # idle workers holding a session of it


@dataclass(frozen=True, slots=True)
class Overview:
    charts: tuple[Chart, ...]
    requests_last_hour: int
    errors_last_hour: int
    top_tenants: list[tuple[str, int, int]]  # (name, requests, errors) since start
    top_models: list[tuple[str, int, int]]  # ("tenant/model", requests, errors)
    protocols: list[tuple[str, int, int]]  # ("HTTP" or "gRPC", requests, errors) since start
    providers: list[str]  # preferred first, as sessions are built
    running_on: list[str]  # the providers the loaded sessions really run on
    loaded: list[LoadedRow]
    uptime_s: float
    version: str


WIDTH: Final = 600
HEIGHT: Final = 120


def overview(metrics: Metrics, models: ModelService, use_cuda: bool) -> Overview:
    points = metrics.minutes.last_hour()
    names = metrics.tenant_label
    # Sessions live in the worker processes: each holds its own copy of what it has run.
    held: dict[str, list[tuple[int, str]]] = {}
    for worker in models.worker_sessions():
        for key, session in worker.sessions.items():
            held.setdefault(key, []).append(session)
    loaded = []
    for m in reversed(models.loaded()):
        copies = held.get(m.compiled.key, [])
        provider = copies[0][1] if copies else ""
        total = sum(cost for cost, _provider in copies)
        loaded.append(
            LoadedRow(names(m.tenant_id), m.name, m.version, provider, total, len(copies))
        )
    tenants, tenant_errors, models_seen, model_errors = _traffic(metrics)
    return Overview(
        charts=_charts(points),
        requests_last_hour=sum(p.requests for p in points),
        errors_last_hour=sum(p.errors for p in points),
        top_tenants=_top(tenants, tenant_errors),
        top_models=_top(models_seen, model_errors),
        protocols=by_protocol(metrics),
        providers=choose_providers(use_cuda),
        running_on=sorted({row.provider for row in loaded if row.provider}),
        loaded=loaded,
        uptime_s=time.time() - STARTED,
        version=_version(),
    )


def _charts(points: list[MinutePoint]) -> tuple[Chart, ...]:
    rates = [p.requests / 60 for p in points]
    p50 = [1000 * (p.p50_s or 0.0) for p in points]
    p99 = [1000 * (p.p99_s or 0.0) for p in points]
    errors = [100 * p.errors / p.requests if p.requests else 0.0 for p in points]
    return (
        _chart("Requests per second", rates, "{:.2f}/s"),
        _chart("p50 latency", p50, "{:.2f} ms"),
        _chart("p99 latency", p99, "{:.2f} ms"),
        _chart("Error rate", errors, "{:.1f}%"),
    )


def _chart(title: str, values: list[float], label: str) -> Chart:
    peak = max(values, default=0.0)
    top = peak or 1.0  # an idle hour: a flat line at the bottom
    step = WIDTH / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{HEIGHT - HEIGHT * v / top:.1f}" for i, v in enumerate(values)
    )
    latest = values[-1] if values else 0.0
    return Chart(title, points, label.format(peak), label.format(latest))


def _traffic(metrics: Metrics) -> tuple[Counter[str], Counter[str], Counter[str], Counter[str]]:
    """Requests and errors since start by tenant and by model, from the Prometheus counters."""
    tenants, models = _by_tenant_and_model(metrics.requests)
    tenant_errors, model_errors = _by_tenant_and_model(metrics.failures)
    return tenants, tenant_errors, models, model_errors


def _by_tenant_and_model(counter: prometheus_client.Counter) -> tuple[Counter[str], Counter[str]]:
    """A Prometheus counter labelled by tenant (and model) summed by tenant and by
    `tenant/model`."""
    tenants: Counter[str] = Counter()
    models: Counter[str] = Counter()
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("tenant"):
                tenant, model = sample.labels["tenant"], sample.labels.get("model", "")
                tenants[tenant] += int(sample.value)
                if model:
                    models[f"{tenant}/{model}"] += int(sample.value)
    return tenants, models


def by_protocol(metrics: Metrics) -> list[tuple[str, int, int]]:
    """Inference requests and errors since start per protocol (HTTP, gRPC), both always shown."""
    requests: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for counter, into in ((metrics.requests, requests), (metrics.failures, errors)):
        for family in counter.collect():
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    into[PROTOCOLS.get(sample.labels["protocol"], "other")] += int(sample.value)
    return [(name, requests[name], errors[name]) for name in ("HTTP", "gRPC")]


def _top(seen: Counter[str], errors: Counter[str]) -> list[tuple[str, int, int]]:
    ranked = sorted(set(seen) | set(errors), key=lambda k: (-seen[k], -errors[k], k))
    return [(name, seen[name], errors[name]) for name in ranked[:TOP]]


def _version() -> str:
    try:
        return metadata.version("graphgate")
    except metadata.PackageNotFoundError:
        return "unknown"
