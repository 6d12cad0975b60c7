"""`graphgate infer --grpc`: the same inference over KServe V2 gRPC (ModelInfer, raw contents).

A plain gRPC client with the protocol's messages (server/grpc/grpc_predict_v2_pb2.py, generated
from the public proto): it imports nothing of the service itself, like the HTTP commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import numpy as np

METHOD: Final = "/inference.GRPCInferenceService/ModelInfer"
DEFAULT_PORT: Final = 8001
CODE_KEY: Final = "graphgate-code"


class GrpcFailure(Exception):
    """The call failed: `code` is graphgate's (or the gRPC status name when none came)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def address_of(grpc_url: str | None, http_url: str) -> tuple[str, bool]:
    """(host:port, TLS) of the gRPC endpoint: `grpc_url` (`grpc://` or `grpcs://`), or the HTTP
    URL's host on port 8001, with TLS when that URL is https."""
    if grpc_url:
        parts = urlsplit(grpc_url)
        if parts.scheme not in ("grpc", "grpcs") or not parts.hostname:
            raise ValueError(
                f"expected a gRPC URL like grpc://HOST:PORT or grpcs://HOST:PORT, got {grpc_url!r}"
            )
        return f"{_host(parts.hostname)}:{parts.port or DEFAULT_PORT}", parts.scheme == "grpcs"
    parts = urlsplit(http_url)
    return f"{_host(parts.hostname or '127.0.0.1')}:{DEFAULT_PORT}", parts.scheme == "https"


def _host(name: str) -> str:
    return f"[{name}]" if ":" in name else name


def infer(
    address: str,
    tls: bool,
    key: str,
    name: str,
    version: int | None,
    feeds: Mapping[str, np.ndarray],
    datatypes: Mapping[str, str],
    timeout_s: float,
) -> dict[str, np.ndarray]:
    """Runs `name` on `feeds` (raw contents in, raw contents out); GrpcFailure on an error."""
    import grpc
    import numpy as np

    from server.grpc import grpc_predict_v2_pb2 as pb

    request = pb.ModelInferRequest(model_name=name, model_version=str(version or ""))
    for input_name, value in feeds.items():
        request.inputs.add(
            name=input_name, datatype=datatypes[value.dtype.name], shape=list(value.shape)
        )
        request.raw_input_contents.append(np.ascontiguousarray(value).tobytes())
    credentials = grpc.ssl_channel_credentials() if tls else None
    channel = (
        grpc.secure_channel(address, credentials)
        if credentials is not None
        else grpc.insecure_channel(address)
    )
    numpy_types = {v: k for k, v in datatypes.items()}
    with channel:
        model_infer = channel.unary_unary(
            METHOD,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        try:
            response = model_infer(
                request, metadata=(("authorization", f"Bearer {key}"),), timeout=timeout_s
            )
        except grpc.RpcError as error:
            raise _failure(error) from None
    outputs: dict[str, np.ndarray] = {}
    for out, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        bf16 = out.datatype == "BF16"  # the upper halves of float32s
        dtype = np.dtype("uint16" if bf16 else numpy_types[out.datatype])
        value = np.frombuffer(raw, dtype).reshape(tuple(out.shape))
        outputs[out.name] = (value.astype(np.uint32) << 16).view(np.float32) if bf16 else value
    return outputs


def _failure(error: object) -> GrpcFailure:
    code_of = getattr(error, "code", None)
    status = code_of() if callable(code_of) else None
    trailers = getattr(error, "trailing_metadata", None)
    metadata = dict(trailers() or ()) if callable(trailers) else {}
    details = getattr(error, "details", None)
    message = (details() if callable(details) else None) or str(error)
    code = metadata.get(CODE_KEY) or (status.name if status is not None else "UNKNOWN")
    return GrpcFailure(str(code), str(message))
