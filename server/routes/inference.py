"""KServe V2 model metadata, readiness and inference under /v2/models (HTTP only)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.routing import Route

from server.dispatch import Cancel, batching
from server.dispatch.batching import Batcher
from server.http.deps import LoadedModelDep, get_loaded_model, get_principal, inference_slot
from server.http.limits import ON_DISCONNECT
from server.http.paths import V2_INFER_PATHS, V2_MODELS
from server.services import inference
from server.services.types import LoadedModel
from server.settings import Settings
from server.v2 import codec

router = APIRouter(prefix=V2_MODELS, tags=["inference"])


# NOTE: `async def` routes: with the caches hit (server/http/deps.py) nothing here blocks, and a
# plain `def` route would cost a thread hop.
@router.get("/{name}")
@router.get("/{name}/versions/{version}")
async def model_metadata(model: LoadedModelDep, request: Request) -> dict[str, Any]:
    meta = inference.metadata(model)
    batchers: batching.Batchers | None = getattr(request.app.state, "batchers", None)
    policy = (
        None
        if batchers is None
        else batchers.policy_for(model.compiled.program.report, model.batching)
    )
    answer: dict[str, Any] = {
        "name": meta.name,
        "versions": [str(meta.version)],
        "platform": meta.platform,
        "inputs": [codec.tensor_metadata(spec) for spec in meta.inputs],
        "outputs": [codec.tensor_metadata(spec) for spec in meta.outputs],
    }
    parameters: dict[str, Any] = {}
    if policy is not None:  # how this version batches (server/dispatch/batching.py)
        parameters["dynamic_batching"] = policy.to_json()
    if model.provenance is not None:  # who signed it: V2 parameters are flat strings
        parameters["signed_by"] = model.provenance["signer"]
        parameters["signing_key_fingerprint"] = model.provenance["key_fingerprint"]
        parameters["signing_method"] = model.provenance["method"]
    if parameters:
        answer["parameters"] = parameters
    return answer


@router.get("/{name}/ready")
@router.get("/{name}/versions/{version}/ready")
async def model_ready(model: LoadedModelDep) -> dict[str, Any]:
    # A model that resolves is compiled, hence ready.
    return {"name": model.name, "version": str(model.version), "ready": True}


# NOTE: a plain Starlette endpoint, not a FastAPI route with dependencies: solving them costs
# ~0.3 ms a request here (benchmarks/results/serving.md), more than everything else a tiny
# model's request does. The same steps, in the same order, with the same functions: the caller
# (key check, rate limit), the tenant's concurrency slot (held while the body is read, decoded
# and run), the model, then the body. Decoding is CPU-bound: a small uncompressed body is
# decoded here, bigger ones in a thread. Every run is in a worker process (server/dispatch),
# waited for by the batch thread or in a thread while this watches for the client leaving.
async def infer(request: Request) -> Response:
    state = request.app.state
    settings: Settings = state.settings
    principal = await get_principal(request, state.tenants)
    async with inference_slot(request, principal):
        name = request.path_params["name"]
        model = await get_loaded_model(request, name, principal, state.models)
        body = await request.body()  # capped by server/http/body_limit.py as it streams
        content, headers = await _answer(model, body, request, settings, principal.key_id)
    return Response(content, headers=headers)


async def _answer(
    model: LoadedModel, body: bytes, request: Request, settings: Settings, source: str
) -> tuple[bytes, dict[str, str]]:
    cap = settings.max_infer_bytes
    timeout_s = settings.infer_timeout_s
    cancel = Cancel()
    batcher = _batcher(request, model)
    # One plain dict for the three readers below (ASGI names are lower case already); a
    # repeated header's last value, for all three alike.
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]}
    if not inference.decodes_cheaply(body, headers):
        work = _in_thread(
            request,
            inference.infer,
            model,
            body,
            headers,
            max_body_bytes=cap,
            timeout_s=timeout_s,
            cancel=cancel,
            batcher=batcher,
            source=source,
        )
    elif batcher is not None:  # no thread waits: the batch thread encodes, wakes the loop once
        decoded = inference.decode(model, body, headers, max_body_bytes=cap)
        deadline = inference.deadline(decoded, headers, timeout_s)
        queued = inference.submit_async(batcher, model, decoded, deadline, cancel, source)
        work = batching.wait_async(queued, deadline)
    else:
        decoded = inference.decode(model, body, headers, max_body_bytes=cap)
        deadline = inference.deadline(decoded, headers, timeout_s)
        work = _in_thread(request, inference.run, model, decoded, deadline, cancel)
    return await _unless_disconnected(request, work, cancel)


def _in_thread(
    request: Request, run: Callable[..., tuple[bytes, dict[str, str]]], *args: Any, **kwargs: Any
) -> Awaitable[tuple[bytes, dict[str, str]]]:
    """`run(*args, **kwargs)` in the app's inference threads (`infer_threads`, server/main.py).

    NOTE: not Starlette's `run_in_threadpool`: anyio's hand-off costs the event loop ~50-90 us
    of CPU a call here, an executor's ~15 us (benchmarks/results/serving.md). What differs:
    a request task cancelled meanwhile (only at a forced shutdown) stops waiting at once
    instead of waiting for the thread; the run itself is stopped by `cancel` either way."""
    threads: Executor = request.app.state.infer_threads
    call = functools.partial(run, *args, **kwargs)
    return asyncio.get_running_loop().run_in_executor(threads, call)


def _batcher(request: Request, model: LoadedModel) -> Batcher | None:
    batchers: batching.Batchers | None = getattr(request.app.state, "batchers", None)
    if batchers is None:
        return None
    return batchers.for_model(model.compiled, model.label, model.batching)


async def _unless_disconnected(
    request: Request, work: Awaitable[tuple[bytes, dict[str, str]]], cancel: Cancel
) -> tuple[bytes, dict[str, str]]:
    """Awaits the run; a client that disconnects meanwhile cancels it (queued or running).
    Behind graphgate's HTTP protocol (server/http/limits.py) the connection's loss calls the
    cancel; under any other server a task waits for the disconnect message."""
    on_disconnect: list[Callable[[], None]] | None = request.scope.get(ON_DISCONNECT)
    if on_disconnect is not None:
        on_disconnect.append(cancel.set)
        return await work
    watch = asyncio.ensure_future(_disconnect(request, cancel))
    try:
        return await work
    finally:
        watch.cancel()


async def _disconnect(request: Request, cancel: Cancel) -> None:
    # The body is read: the next message is the disconnect, whenever it comes.
    while (await request.receive())["type"] != "http.disconnect":
        pass
    cancel.set()


router.routes.extend(Route(path, infer, methods=["POST"]) for path in V2_INFER_PATHS)
