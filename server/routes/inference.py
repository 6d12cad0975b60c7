"""KServe V2 model metadata, readiness and inference under /v2/models (HTTP only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from server.deps import LoadedModelDep, get_loaded_model, get_principal, inference_slot
from server.services import inference
from server.services.types import LoadedModel
from server.settings import Settings
from server.v2.errors import InferBodyTooLarge

router = APIRouter(prefix="/v2/models", tags=["inference"])


async def read_body(request: Request, cap: int) -> bytes:
    """The raw body, whatever its Content-Type, read up to `cap` bytes (else 413)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise _too_large(cap)
    chunks: list[bytes] = []
    seen = 0
    async for chunk in request.stream():  # counted as it streams: Content-Length can lie
        seen += len(chunk)
        if seen > cap:
            raise _too_large(cap)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(cap: int) -> InferBodyTooLarge:
    return InferBodyTooLarge(f"request body exceeds the {cap}-byte limit")


# NOTE: `async def` routes: with the caches hit (server/deps.py) nothing here blocks, and a
# plain `def` route would cost a thread hop.
@router.get("/{name}")
@router.get("/{name}/versions/{version}")
async def model_metadata(model: LoadedModelDep) -> dict[str, Any]:
    return inference.metadata(model)


@router.get("/{name}/ready")
@router.get("/{name}/versions/{version}/ready")
async def model_ready(model: LoadedModelDep) -> dict[str, Any]:
    return inference.ready(model)


# NOTE: a plain Starlette endpoint, not a FastAPI route with dependencies: solving them costs
# ~0.3 ms a request here (benchmarks/results/serving.md), more than everything else a tiny
# model's request does. The same steps, in the same order, with the same functions: the caller
# (key check, rate limit), the tenant's concurrency slot (held while the body is read, decoded
# and run), the model, then the body. Decoding and running are CPU-bound, so they go to the
# threadpool in one hop, except a small uncompressed body (decoded here) for a tiny model (run
# here too): a thread hop costs more than either.
async def infer(request: Request) -> Response:
    state = request.app.state
    settings: Settings = state.settings
    principal = await get_principal(request, state.tenants)
    async with inference_slot(request, principal):
        name = request.path_params["name"]
        model = await get_loaded_model(request, name, principal, state.models)
        body = await read_body(request, settings.max_infer_bytes)
        content, headers = await _answer(model, body, request, settings)
    return Response(content, headers=headers)


async def _answer(
    model: LoadedModel, body: bytes, request: Request, settings: Settings
) -> tuple[bytes, dict[str, str]]:
    cap = settings.max_infer_bytes
    if not inference.decodes_cheaply(body, request.headers):
        return await run_in_threadpool(
            inference.infer, model, body, request.headers, max_body_bytes=cap
        )
    decoded = inference.decode(model, body, request.headers, max_body_bytes=cap)
    if inference.runs_cheaply(model, decoded, settings.inline_max_flops):
        return inference.run(model, decoded)
    return await run_in_threadpool(inference.run, model, decoded)


router.routes.append(Route("/v2/models/{name}/infer", infer, methods=["POST"]))
router.routes.append(Route("/v2/models/{name}/versions/{version}/infer", infer, methods=["POST"]))
