"""KServe V2 model metadata, readiness and inference under /v2/models (HTTP only)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from server.deps import InferenceSlot, LoadedModelDep, SettingsDep
from server.services import inference
from server.v2.errors import InferBodyTooLarge

router = APIRouter(prefix="/v2/models", tags=["inference"])


async def read_body(request: Request, settings: SettingsDep) -> bytes:
    """The raw body, whatever its Content-Type, read up to `max_infer_bytes` (else 413)."""
    cap = settings.max_infer_bytes
    declared = request.headers.get("content-length", "")
    too_large = InferBodyTooLarge(f"request body exceeds the {cap}-byte limit")
    if declared.isdigit() and int(declared) > cap:
        raise too_large
    chunks: list[bytes] = []
    seen = 0
    async for chunk in request.stream():  # counted as it streams: Content-Length can lie
        seen += len(chunk)
        if seen > cap:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


# NOTE: the model is resolved (auth, tenant, existence) before the body is read.
InferBody = Annotated[bytes, Depends(read_body)]


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


# NOTE: decoding and running are CPU-bound, so they go to the threadpool, in one hop, except
# a small uncompressed body (decoded here) for a tiny model (run here too): a thread hop costs
# more than either (benchmarks/results/serving.md). The tenant's concurrency slot is taken first
# (after auth and the rate limit) and held until the answer, body reading included.
@router.post("/{name}/infer", dependencies=[InferenceSlot])
@router.post("/{name}/versions/{version}/infer", dependencies=[InferenceSlot])
async def infer(
    model: LoadedModelDep, body: InferBody, request: Request, settings: SettingsDep
) -> Response:
    cap = settings.max_infer_bytes
    if not inference.decodes_cheaply(body, request.headers):
        content, headers = await run_in_threadpool(
            inference.infer, model, body, request.headers, max_body_bytes=cap
        )
        return Response(content, headers=headers)
    decoded = inference.decode(model, body, request.headers, max_body_bytes=cap)
    if inference.runs_cheaply(model, decoded, settings.inline_max_flops):
        content, headers = inference.run(model, decoded)
    else:
        content, headers = await run_in_threadpool(inference.run, model, decoded)
    return Response(content, headers=headers)
