"""KServe V2 liveness, readiness and server metadata."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from server import __version__

router = APIRouter(tags=["health"])


@router.get("/v2/health/live")
async def live() -> dict[str, bool]:
    return {"live": True}


@router.get("/v2/health/ready")
async def ready() -> dict[str, bool]:
    return {"ready": True}


@router.get("/v2")
async def server_metadata() -> dict[str, Any]:
    return {"name": "graphgate", "version": __version__, "extensions": ["binary_tensor_data"]}
