"""V2 inference use cases: model metadata, readiness, and one inference request (no FastAPI)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from server.services.types import LoadedModel
from server.v2 import codec

PLATFORM: Final = "onnxruntime_onnx"
DEFAULT_MAX_BODY_BYTES: Final = 64 * 1024 * 1024  # Triton's --http-max-input-size default


def metadata(model: LoadedModel) -> dict[str, Any]:
    """V2 model metadata: V2 datatypes, -1 for variable dims."""
    program = model.compiled.program
    return {
        "name": model.name,
        "versions": [str(model.version)],
        "platform": PLATFORM,
        "inputs": [codec.tensor_metadata(spec) for spec in program.inputs],
        "outputs": [codec.tensor_metadata(spec) for spec in program.outputs],
    }


def ready(model: LoadedModel) -> dict[str, Any]:
    """A model that resolves is compiled, hence ready."""
    return {"name": model.name, "version": str(model.version), "ready": True}


def infer(
    model: LoadedModel,
    body: bytes,
    headers: Mapping[str, str],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> tuple[bytes, dict[str, str]]:
    """Decodes a V2 request (JSON or binary), runs it, encodes the response.

    `headers` are the request's; names are matched case-insensitively. Returns the response
    body and its headers (Content-Type, and Inference-Header-Content-Length when binary).
    """
    lower = {name.lower(): value for name, value in headers.items()}
    body = codec.decompress(body, lower.get("content-encoding"), max_body_bytes)
    program = model.compiled.program
    request = codec.decode_request(
        body, lower.get(codec.HEADER_LENGTH), program.inputs, program.outputs
    )
    values = model.compiled.run(request.feeds)
    results = [(out, values[out.spec.name]) for out in request.outputs]
    return codec.encode_response(model.name, str(model.version), request.id, results)
