"""GET /metrics: the Prometheus text format, for admin keys only (labels name tenants and models)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from server.http.deps import MetricsDep, require_admin

router = APIRouter(tags=["metrics"], dependencies=[Depends(require_admin)])


@router.get("/metrics")
async def metrics(recorded: MetricsDep) -> Response:
    content, media_type = recorded.exposition()
    return Response(content, media_type=media_type)
