"""KServe V2 model metadata, readiness and inference under /v2/models (HTTP only)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from server.dispatch import Cancel, batching
from server.http.deps import (
    LoadedModelDep,
    get_loaded_model,
    get_principal,
    take_inference_slot,
)
from server.http.limits import ON_DISCONNECT
from server.http.paths import V2_INFER_PATHS, V2_MODELS
from server.services import inference
from server.v2 import codec

log = logging.getLogger("graphgate.server")
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
# model's request does. Admission is the same steps, in the same order, with the same
# functions: the caller (key check, rate limit), the tenant's concurrency slot (held until the
# answer is sent), the model, then the body. Everything after is ONE call to the inference
# service (server/services/inference.py: decode, budget, dispatch, run and encode in a
# worker); this only watches for the client leaving, and sends the answer.
async def infer(request: Request) -> Response:
    state = request.app.state
    principal = await get_principal(request, state.tenants)
    release = take_inference_slot(request, principal)
    try:
        model = await get_loaded_model(
            request, request.path_params["name"], principal, state.models
        )
        body = await _read_body(request)
        cancel = Cancel()
        # One plain dict (ASGI names are lower case already); a repeated header's last value.
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]}
        work = inference.answer(
            model, body, headers, dispatch=state.dispatch, cancel=cancel, source=principal.key_id
        )
        reply = await _unless_disconnected(request, work, cancel)
    except BaseException:
        release()
        raise
    return AnswerResponse(reply, release)


class AnswerResponse(Response):
    """Sends an encoded answer in the pieces it comes in (server/dispatch/answer.py: the whole
    of a small one, 1 MiB at a time from its file for a big one), so the server never holds
    more than a piece. The deadline covers the sending too: past it, the connection is cut.
    The answer is closed and `done` called (the tenant's slot) however the sending ends."""

    def __init__(self, reply: inference.Reply, done: Callable[[], None]) -> None:
        self.reply = reply
        self.done = done
        self.status_code = 200
        self.background = None
        answer = reply.answer
        self.body = b""
        self.init_headers({**reply.headers, "content-length": str(answer.length)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: ARG002
        answer = self.reply.answer
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            if not answer.streamed:  # held whole: one body message (the last), sent with the head
                await send({"type": "http.response.body", "body": answer.body()})
                return
            for piece in answer.chunks():  # read from its file a piece at a time
                if time.monotonic() >= self.reply.deadline:
                    log.info("answer cut at its deadline: %s", scope["path"])
                    return  # the server closes a response it did not complete
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.reply.close()
            self.done()


async def _read_body(request: Request) -> list[bytes]:
    """The request's body as the pieces it streamed in, capped by server/http/body_limit.py.

    NOTE: not Starlette's `request.body()`, which joins the pieces on the event loop: the
    service joins them where it decodes them, a big body in a thread (inference.answer)."""
    return [piece async for piece in request.stream()]


async def _unless_disconnected(
    request: Request, work: Awaitable[inference.Reply], cancel: Cancel
) -> inference.Reply:
    """Awaits the answer; a client that disconnects meanwhile cancels it (queued, running or
    being encoded). Behind graphgate's HTTP protocol (server/http/limits.py) the connection's
    loss calls the cancel; under any other server a task waits for the disconnect message."""
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
