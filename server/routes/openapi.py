"""The control plane's OpenAPI document at /v1/openapi.json, for authenticated callers.

It documents the `/v1` routes (tenant and admin) only. The `/v2` routes follow the KServe V2
inference protocol, whose own OpenAPI document is the reference; they are left out here.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.openapi.utils import get_openapi
from starlette.routing import BaseRoute

from server import __version__
from server.http.deps import PrincipalDep
from server.http.paths import V1

router = APIRouter(prefix=V1, tags=["meta"])


@router.get("/openapi.json", include_in_schema=False)
async def openapi(request: Request, _principal: PrincipalDep) -> dict[str, Any]:
    state = request.app.state
    document: dict[str, Any] | None = getattr(state, "openapi_v1", None)
    if document is None:  # built once: the routes do not change after start-up
        document = control_plane_openapi(request.app.routes)
        state.openapi_v1 = document
    return document


def control_plane_openapi(routes: list[BaseRoute]) -> dict[str, Any]:
    document = get_openapi(
        title="graphgate control plane",
        version=__version__,
        description="Tenant models and the operator's admin API. Every route needs "
        "`Authorization: Bearer <key>`; errors are {error, code}.",
        routes=routes,
    )
    # Filtered here, not before: included routers are not plain routes with a path.
    paths = document.get("paths", {})
    document["paths"] = {p: ops for p, ops in paths.items() if p.startswith(V1 + "/")}
    document.setdefault("components", {})["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer"}
    }
    document["security"] = [{"bearer": []}]
    return document
