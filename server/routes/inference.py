"""KServe V2 model metadata, readiness and inference under /v2/models (HTTP only)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

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


@router.get("/{name}")
@router.get("/{name}/versions/{version}")
def model_metadata(model: LoadedModelDep) -> dict[str, Any]:
    return inference.metadata(model)


@router.get("/{name}/ready")
@router.get("/{name}/versions/{version}/ready")
def model_ready(model: LoadedModelDep) -> dict[str, Any]:
    return inference.ready(model)


# NOTE: `def`: decoding and running are CPU-bound, so FastAPI runs this in its threadpool.
# The tenant's concurrency slot is taken first (after auth and the rate limit) and held until
# the answer, body reading included.
@router.post("/{name}/infer", dependencies=[InferenceSlot])
@router.post("/{name}/versions/{version}/infer", dependencies=[InferenceSlot])
def infer(
    model: LoadedModelDep, body: InferBody, request: Request, settings: SettingsDep
) -> Response:
    content, headers = inference.infer(
        model, body, request.headers, max_body_bytes=settings.max_infer_bytes
    )
    return Response(content, headers=headers)
