"""ModelInfer: one inference over gRPC, through the very steps and services a REST inference
takes (server/routes/inference.py), in the same order.

NOTE: `model_infer` is the one place that sequences those service calls for gRPC: admission
(key, rate, slot), the model, the request decoded as a V2 binary request (server/grpc/
translate.py), dispatched (inline, in a thread, or into the model's batch), run, encoded, and
the answer translated back. When the REST path becomes one service call, this body becomes
that call between `translate.to_v2` and `translate.from_v2`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Final

from server.dispatch import Cancel, batching
from server.dispatch.batching import Batcher
from server.grpc import admission, translate
from server.grpc import grpc_predict_v2_pb2 as pb
from server.services import inference
from server.services.types import LoadedModel, Principal
from server.settings import Settings

Answer = tuple[bytes, dict[str, str]]
# Answers at most this big are translated on the event loop; bigger ones (typed contents turn
# each element into a Python number) in a thread, as REST decodes big bodies.
INLINE_MAX_ANSWER_BYTES: Final = inference.INLINE_MAX_BODY_BYTES


@dataclass(slots=True)
class CallNotes:
    """What a call learned on its way, for its metrics: the caller and the model."""

    principal: Principal | None = None
    model: LoadedModel | None = None


async def model_infer(
    state: Any,
    request: pb.ModelInferRequest,
    metadata: Mapping[str, str],
    time_left_s: float | None,
    notes: CallNotes,
) -> pb.ModelInferResponse:
    """Answers `request`; `time_left_s` is the gRPC deadline's (None without one). Raises
    graphgate's domain errors (server/grpc/errors.py makes them statuses); cancelling the task
    (the client cancelled, or its deadline passed) cancels the run, queued or running."""
    notes.principal = principal = await admission.authenticate(state, metadata)
    async with admission.inference_slot(state, principal):
        notes.model = model = await admission.resolve(
            state, principal, request.model_name, request.model_version
        )
        v2 = translate.to_v2(request, model.compiled.program.outputs)
        headers = {**v2.headers, **_timeout_metadata(metadata)}
        body, answer_headers = await _answer(state, model, v2.body, headers, time_left_s, principal)
    if len(body) <= INLINE_MAX_ANSWER_BYTES:
        return translate.from_v2(body, answer_headers, v2.typed)
    response: pb.ModelInferResponse = await _in_thread(
        state, translate.from_v2, body, answer_headers, v2.typed
    )
    return response


async def _answer(
    state: Any,
    model: LoadedModel,
    body: bytes,
    headers: dict[str, str],
    time_left_s: float | None,
    principal: Principal,
) -> Answer:
    """REST's `_answer` (server/routes/inference.py), the gRPC deadline as the longest wait."""
    settings: Settings = state.settings
    cap = settings.max_infer_bytes
    timeout_s = settings.infer_timeout_s
    if time_left_s is not None:
        timeout_s = min(timeout_s, time_left_s)
    source = principal.key_id
    cancel = Cancel()
    batcher = _batcher(state, model)
    work: Awaitable[Answer]
    if not inference.decodes_cheaply(body, headers):
        work = _in_thread(
            state,
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
    elif batcher is not None:
        decoded = inference.decode(model, body, headers, max_body_bytes=cap)
        deadline = inference.deadline(decoded, headers, timeout_s)
        queued = inference.submit_async(batcher, model, decoded, deadline, cancel, source)
        work = batching.wait_async(queued, deadline)
    else:
        decoded = inference.decode(model, body, headers, max_body_bytes=cap)
        deadline = inference.deadline(decoded, headers, timeout_s)
        work = _in_thread(state, inference.run, model, decoded, deadline, cancel)
    try:
        return await work
    except asyncio.CancelledError:  # the call ended (cancelled, or past its deadline)
        cancel.set()
        raise


def _timeout_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """`graphgate-timeout-ms` metadata, read as REST reads the header of that name."""
    raw = metadata.get(inference.TIMEOUT_HEADER)
    return {} if raw is None else {inference.TIMEOUT_HEADER: raw}


def _batcher(state: Any, model: LoadedModel) -> Batcher | None:
    batchers: batching.Batchers | None = getattr(state, "batchers", None)
    if batchers is None:
        return None
    return batchers.for_model(model.compiled, model.label, model.batching)


def _in_thread(state: Any, run: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """`run(*args, **kwargs)` in the app's inference threads, as REST runs it."""
    threads: Executor = state.infer_threads
    return asyncio.get_running_loop().run_in_executor(
        threads, functools.partial(run, *args, **kwargs)
    )
