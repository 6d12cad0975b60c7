"""ModelInfer: one inference over gRPC, through the very steps and services a REST inference
takes (server/routes/inference.py), in the same order.

NOTE: `model_infer` is gRPC's admission (key, rate, slot: server/grpc/admission.py) and the
model, then the message translated to a V2 binary request and checked by the codec as REST's
body is (server/grpc/translate.py), the same service call past decoding that the REST route
makes (`inference.answer_decoded`: budget, dispatch, run and encode), and the answer
translated back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Final

from server.dispatch import Cancel
from server.grpc import admission, translate
from server.grpc import grpc_predict_v2_pb2 as pb
from server.services import inference
from server.services.types import LoadedModel, Principal
from server.v2.codec import InferRequest

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
        program = model.compiled.program
        v2 = translate.to_v2(request, program.outputs)
        decoded = v2.decode(program.inputs, program.outputs)
        headers = _timeout_metadata(metadata)
        size = len(v2.binary)  # the tensors' bytes: what makes a message big
        body, answer_headers = await _answer(
            state, model, decoded, size, headers, time_left_s, principal
        )
    if len(body) <= INLINE_MAX_ANSWER_BYTES:
        return translate.from_v2(body, answer_headers, v2.typed)
    response: pb.ModelInferResponse = await _in_thread(
        state, translate.from_v2, body, answer_headers, v2.typed
    )
    return response


async def _answer(
    state: Any,
    model: LoadedModel,
    decoded: InferRequest,
    size: int,
    headers: dict[str, str],
    time_left_s: float | None,
    principal: Principal,
) -> Answer:
    """The REST route's service call past decoding (server/services/inference.py
    `answer_decoded`: budget, dispatch, run and encode in the worker), the gRPC deadline as
    the longest wait."""
    dispatch: inference.Dispatch = state.dispatch
    if time_left_s is not None:
        dispatch = dataclasses.replace(dispatch, timeout_s=min(dispatch.timeout_s, time_left_s))
    cancel = Cancel()
    try:
        reply = await inference.answer_decoded(
            model,
            decoded,
            headers,
            size=size,
            dispatch=dispatch,
            cancel=cancel,
            source=principal.key_id,
        )
    except asyncio.CancelledError:  # the call ended (cancelled, or past its deadline)
        cancel.set()
        raise
    try:
        # A gRPC message is whole: a big answer (a spill file) is read in a thread.
        if reply.answer.streamed:
            whole: bytes = await _in_thread(state, reply.answer.body)
        else:
            whole = reply.answer.body()
        return whole, reply.headers
    finally:
        reply.close()


def _timeout_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """`graphgate-timeout-ms` metadata, read as REST reads the header of that name."""
    raw = metadata.get(inference.TIMEOUT_HEADER)
    return {} if raw is None else {inference.TIMEOUT_HEADER: raw}


def _in_thread(state: Any, run: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """`run(*args, **kwargs)` in the app's inference threads, as REST runs it."""
    threads: Executor = state.infer_threads
    return asyncio.get_running_loop().run_in_executor(
        threads, functools.partial(run, *args, **kwargs)
    )
