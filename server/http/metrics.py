"""ASGI middleware that records every V2 inference request in the app's Metrics (the infer
endpoint's fast path, server/http/fast_path.py, records its requests with `record_inference`).

It sees the final status whatever produced it (the route, a dependency, an error handler),
and reads the labels the request left in its state: the caller (`deps.get_principal`), the
resolved model (`deps.get_loaded_model`) and the error code (`errors`). A request that never got
that far is labelled "" for them, never with the raw path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.dispatch.batching import Batchers, BatchSizes
from server.http import request_state
from server.http.paths import INFER
from server.services.metrics import NO_LABEL, Metrics
from server.services.types import LoadedModel, Principal

BINARY_HEADER: Final = b"inference-header-content-length"


class InferenceMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in INFER:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # when the app raises before answering, the server answers 500

        async def observing_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observing_send)
        finally:
            record_inference(self.metrics, scope, status, time.perf_counter() - started)


def record_inference(metrics: Metrics, scope: Scope, status: int, seconds: float) -> None:
    """Counts one V2 inference, by the labels its request left in its state (also called by
    the infer endpoint's fast path, server/http/fast_path.py)."""
    state = request_state.state_of(scope)
    principal = state.get(request_state.PRINCIPAL)
    model = state.get(request_state.MODEL)
    code = state.get(request_state.ERROR_CODE)
    if status < 400:
        code = None
    elif not isinstance(code, str):
        code = "INTERNAL" if status == 500 else f"HTTP_{status}"
    metrics.inference(
        principal.tenant_id if isinstance(principal, Principal) else "",
        model.name if isinstance(model, LoadedModel) else NO_LABEL,
        protocol="binary" if any(name == BINARY_HEADER for name, _ in scope["headers"]) else "json",
        status=str(status),
        code=code,
        seconds=seconds,
    )


class BatchSizeCollector:
    """`graphgate_batch_size`: rows per worker run of every model version that batches, the
    batch sizes the dynamic batcher actually achieved (1 when a request ran alone), and
    `graphgate_batch_row_seconds`, what a row adds to its runs (batching.RowCost). Read from
    the app's batchers (`app_state.batchers`, which tests may swap) when /metrics is scraped,
    so the batch threads only bump a few integers per batch."""

    def __init__(self, app_state: object, tenant_label: Callable[[str], str]) -> None:
        self._state = app_state
        self._tenant_label = tenant_label

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "graphgate_batch_size",
            "Rows per worker run of a model version that batches (dynamic batching).",
            labels=["tenant", "model", "version"],
        )
        batchers = getattr(self._state, "batchers", None)
        snapshot = batchers.sizes.snapshot() if isinstance(batchers, Batchers) else {}
        for (tenant_id, model, version), (counts, total) in sorted(snapshot.items()):
            cumulative, seen = [], 0
            for bound, count in zip([*map(str, BatchSizes.BOUNDS), "+Inf"], counts, strict=True):
                seen += count
                cumulative.append((bound, float(seen)))
            labels = [self._tenant_label(tenant_id), model, str(version)]
            family.add_metric(labels, cumulative, float(total))
        yield family
        costs = GaugeMetricFamily(
            "graphgate_batch_row_seconds",
            "Seconds one row adds to a run of a model version that batches: what caps its "
            "batches (GRAPHGATE_BATCH_MAX_RUN_MS).",
            labels=["tenant", "model", "version"],
        )
        row_seconds = batchers.row_seconds() if isinstance(batchers, Batchers) else {}
        for label, seconds in sorted(row_seconds.items()):
            if label in snapshot:  # a deleted version's series goes with its histogram's
                tenant_id, model, version = label
                costs.add_metric([self._tenant_label(tenant_id), model, str(version)], seconds)
        yield costs
