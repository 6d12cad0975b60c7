"""V2 inference use cases: model metadata, readiness, and one inference request (no FastAPI)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from concurrent.futures import Future
from functools import partial
from typing import Final

import numpy as np

from server.dispatch import Cancel, batching
from server.dispatch.batching import Batcher
from server.errors import BadRequest
from server.services.types import LoadedModel, ModelMetadata
from server.v2 import codec
from server.v2.codec import InferRequest

PLATFORM: Final = "onnxruntime_onnx"
DEFAULT_MAX_BODY_BYTES: Final = 64 * 1024 * 1024  # Triton's --http-max-input-size default
# Bodies at most this big, uncompressed, decode in microseconds: cheaper than a thread hop.
# Bigger ones (a JSON tensor of 150k floats takes ~13 ms) and compressed ones (which may
# inflate up to the body cap) are decoded off the event loop.
INLINE_MAX_BODY_BYTES: Final = 16 * 1024
TIMEOUT_HEADER: Final = "graphgate-timeout-ms"


def metadata(model: LoadedModel) -> ModelMetadata:
    """V2 model metadata: the signature of the resolved version."""
    program = model.compiled.program
    return ModelMetadata(model.name, model.version, PLATFORM, program.inputs, program.outputs)


def infer(
    model: LoadedModel,
    body: bytes,
    headers: Mapping[str, str],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    timeout_s: float = 30.0,
    cancel: Cancel | None = None,
    batcher: Batcher | None = None,
    source: str = "",
) -> tuple[bytes, dict[str, str]]:
    """Decodes a V2 request (JSON or binary), runs it, encodes the response.

    `headers` are the request's; names are matched case-insensitively. Returns the response
    body and its headers (Content-Type, and Inference-Header-Content-Length when binary).
    `timeout_s` is the deadline's default (and longest); see `deadline`.
    """
    decoded = decode(model, body, headers, max_body_bytes=max_body_bytes)
    return run(model, decoded, deadline(decoded, headers, timeout_s), cancel, batcher, source)


def decode(
    model: LoadedModel,
    body: bytes,
    headers: Mapping[str, str],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> InferRequest:
    """Decodes and checks a V2 request (JSON or binary) against the model's signature."""
    lower = {name.lower(): value for name, value in headers.items()}
    body = codec.decompress(body, lower.get("content-encoding"), max_body_bytes)
    program = model.compiled.program
    return codec.decode_request(
        body, lower.get(codec.HEADER_LENGTH), program.inputs, program.outputs
    )


def deadline(request: InferRequest, headers: Mapping[str, str], timeout_s: float) -> float:
    """When the request must be answered (time.monotonic()): `timeout_s` from now, or sooner
    when the client asks (V2 parameter `timeout` in microseconds, or Graphgate-Timeout-Ms)."""
    seconds = timeout_s
    if request.timeout_us is not None:
        seconds = min(seconds, request.timeout_us / 1e6)
    raw = next((v for k, v in headers.items() if k.lower() == TIMEOUT_HEADER), None)
    if raw is not None:
        if not raw.isascii() or not raw.isdigit() or len(raw) > 12 or int(raw) == 0:
            raise BadRequest(
                f"Graphgate-Timeout-Ms: expected a positive integer (milliseconds), got "
                f"{raw[:40]!r}"
            )
        seconds = min(seconds, int(raw) / 1e3)
    return time.monotonic() + seconds


def run(
    model: LoadedModel,
    request: InferRequest,
    deadline: float | None = None,
    cancel: Cancel | None = None,
    batcher: Batcher | None = None,
    source: str = "",
) -> tuple[bytes, dict[str, str]]:
    """Runs a decoded request in a worker and encodes the response (body and headers);
    through `batcher` (server/dispatch/batching.py) when the model batches."""
    if batcher is not None:
        return batching.wait(submit(batcher, model, request, deadline, cancel, source), deadline)
    values = model.compiled.run(
        request.feeds, deadline=deadline, cancelled=cancel, label=model.label
    )
    return _encode(model, request, values)


def submit(
    batcher: Batcher,
    model: LoadedModel,
    request: InferRequest,
    deadline: float | None,
    cancel: Cancel | None,
    source: str,
) -> Future[tuple[bytes, dict[str, str]]]:
    """Queues a decoded request in its model's batcher; the future holds the encoded
    response (encoded on the batch's thread, off the event loop). `source`: whose queue
    (fairness: the caller's key)."""
    return batcher.submit(
        request.feeds,
        partial(_encode, model, request),
        source=source,
        deadline=deadline,
        cancel=cancel,
    )


def submit_async(
    batcher: Batcher,
    model: LoadedModel,
    request: InferRequest,
    deadline: float | None,
    cancel: Cancel | None,
    source: str,
) -> asyncio.Future[tuple[bytes, dict[str, str]]]:
    """`submit` from the event loop: the batch's answers come back to the loop at once
    (Batcher.submit_async); await with `batching.wait_async`."""
    return batcher.submit_async(
        request.feeds,
        partial(_encode, model, request),
        source=source,
        deadline=deadline,
        cancel=cancel,
    )


def _encode(
    model: LoadedModel, request: InferRequest, values: Mapping[str, np.ndarray]
) -> tuple[bytes, dict[str, str]]:
    results = [(out, values[out.spec.name]) for out in request.outputs]
    return codec.encode_response(model.name, str(model.version), request.id, results)


def decodes_cheaply(body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether decoding `body` is cheap enough for the event loop: small and not compressed."""
    if len(body) > INLINE_MAX_BODY_BYTES:
        return False
    encoding = next((v for k, v in headers.items() if k.lower() == "content-encoding"), None)
    return (encoding or "identity").strip().lower() == "identity"
