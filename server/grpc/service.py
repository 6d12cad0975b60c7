"""`inference.GRPCInferenceService`: its six methods over the app's services (gRPC only).

Each handler reads its request as raw bytes and parses it itself: grpcio's own deserializer
answers a message protobuf cannot parse with INTERNAL, and bad input is never INTERNAL here
(INVALID_ARGUMENT `INFER_MALFORMED`). Before parsing, the call's metadata is held to the HTTP
head's caps (GRAPHGATE_MAX_HEADERS entries, GRAPHGATE_MAX_HEADER_BYTES bytes; the same codes)
and a ModelInfer message to GRAPHGATE_MAX_INFER_BYTES (PAYLOAD_TOO_LARGE).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from grpc import aio

from server import __version__
from server.errors import BadRequest, NotFound, PayloadTooLarge
from server.grpc import admission, errors
from server.grpc import grpc_predict_v2_pb2 as pb
from server.grpc.infer import CallNotes, model_infer
from server.http.limits import HEAD_TOO_LARGE, TOO_MANY_HEADERS
from server.services import inference
from server.services.metrics import NO_LABEL, Metrics
from server.settings import Settings
from server.v2 import codec
from server.v2.errors import InferMalformed

NAME: Final = "inference.GRPCInferenceService"
EXTENSIONS: Final = ("binary_tensor_data",)  # as GET /v2 (server/routes/health.py)
# Every message but ModelInfer's is a name and a version at most: this is plenty.
SMALL_MESSAGE_BYTES: Final = 64 * 1024
# Messages at most this big are parsed on the event loop (raw contents are copied once, at
# memory speed); bigger ones in a thread.
INLINE_PARSE_BYTES: Final = 1024 * 1024

Request = TypeVar("Request", bound=Message)
Context = aio.ServicerContext[Any, Any]
Method = Callable[[Any, "Call"], Awaitable[Message]]


@dataclass(frozen=True, slots=True)
class Call:
    """One call as its method sees it: its metadata (checked), its context, and the notes it
    leaves for the metrics."""

    metadata: Mapping[str, str]
    context: Context
    notes: CallNotes


class InferenceService:
    """The service's handlers over `state` (the app's state: settings, services, limits)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.settings: Settings = state.settings

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {
            "ServerLive": self._unary(pb.ServerLiveRequest, self.server_live),
            "ServerReady": self._unary(pb.ServerReadyRequest, self.server_ready),
            "ModelReady": self._unary(pb.ModelReadyRequest, self.model_ready),
            "ServerMetadata": self._unary(pb.ServerMetadataRequest, self.server_metadata),
            "ModelMetadata": self._unary(pb.ModelMetadataRequest, self.model_metadata),
            "ModelInfer": self._unary(pb.ModelInferRequest, self.model_infer, counted=True),
        }
        return grpc.method_handlers_generic_handler(NAME, methods)

    # -- the methods -----------------------------------------------------------------------

    async def server_live(
        self, _request: pb.ServerLiveRequest, _call: Call
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(
        self, _request: pb.ServerReadyRequest, _call: Call
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)  # as /v2/health/ready

    async def server_metadata(
        self, _request: pb.ServerMetadataRequest, _call: Call
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(
            name="graphgate", version=__version__, extensions=EXTENSIONS
        )

    async def model_ready(self, request: pb.ModelReadyRequest, call: Call) -> pb.ModelReadyResponse:
        # A model that resolves is compiled, hence ready; one the caller has not (missing, or
        # another tenant's) is not ready, as Triton answers; a bad key is still an error.
        principal = await admission.authenticate(self.state, call.metadata)
        try:
            await admission.resolve(self.state, principal, request.name, request.version)
        except NotFound:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    async def model_metadata(
        self, request: pb.ModelMetadataRequest, call: Call
    ) -> pb.ModelMetadataResponse:
        principal = await admission.authenticate(self.state, call.metadata)
        model = await admission.resolve(self.state, principal, request.name, request.version)
        meta = inference.metadata(model)
        return pb.ModelMetadataResponse(
            name=meta.name,
            versions=[str(meta.version)],
            platform=meta.platform,
            inputs=[_tensor(codec.tensor_metadata(spec)) for spec in meta.inputs],
            outputs=[_tensor(codec.tensor_metadata(spec)) for spec in meta.outputs],
        )

    async def model_infer(self, request: pb.ModelInferRequest, call: Call) -> pb.ModelInferResponse:
        time_left_s = call.context.time_remaining()
        return await model_infer(self.state, request, call.metadata, time_left_s, call.notes)

    # -- every call ------------------------------------------------------------------------

    def _unary(
        self, kind: type[Request], method: Method, *, counted: bool = False
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """The handler of one method: metadata caps, parsing, errors as statuses; a `counted`
        call is recorded in the metrics (protocol `grpc`) whatever its outcome."""
        cap = self.settings.max_infer_bytes if kind is pb.ModelInferRequest else SMALL_MESSAGE_BYTES

        async def behavior(raw: bytes, context: Context) -> Message:
            started = time.perf_counter()
            notes = CallNotes()
            outcome: tuple[grpc.StatusCode, str | None] = (grpc.StatusCode.OK, None)
            try:
                metadata = self._metadata(context.invocation_metadata() or ())
                request = await self._parse(kind, raw, cap)
                return await method(request, Call(metadata, context, notes))
            except asyncio.CancelledError:  # the client cancelled, or its deadline passed
                outcome = _ended(context)
                raise
            except Exception as error:  # every error becomes a status
                outcome = errors.status_of(error)
                await errors.abort(context, error)
            finally:
                if counted:
                    self._record(notes, *outcome, time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            behavior, request_deserializer=None, response_serializer=_serialize
        )

    def _metadata(self, entries: Any) -> dict[str, str]:
        """The call's metadata (names are lower case on the wire), held to the head's caps."""
        items = list(entries)
        if len(items) > self.settings.max_headers:
            raise errors.Refusal(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                TOO_MANY_HEADERS,
                f"expected at most {self.settings.max_headers} metadata entries, got {len(items)}",
            )
        size = sum(len(key) + len(value) for key, value in items)
        if size > self.settings.max_header_bytes:
            raise errors.Refusal(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                HEAD_TOO_LARGE,
                f"expected metadata of at most {self.settings.max_header_bytes} bytes, got {size}",
            )
        return {key: value for key, value in items if isinstance(value, str)}

    async def _parse(self, kind: type[Request], raw: bytes, cap: int) -> Request:
        if len(raw) > cap:
            raise PayloadTooLarge(
                f"expected a {kind.DESCRIPTOR.name} of at most {cap} bytes, got {len(raw)}"
            )
        if len(raw) <= INLINE_PARSE_BYTES:
            return _parsed(kind, raw)
        # in the app's inference threads, as REST decodes its big bodies
        loop = asyncio.get_running_loop()
        parsed: Request = await loop.run_in_executor(self.state.infer_threads, _parsed, kind, raw)
        return parsed

    def _record(
        self, notes: CallNotes, status: grpc.StatusCode, code: str | None, seconds: float
    ) -> None:
        metrics: Metrics = self.state.metrics
        metrics.inference(
            "" if notes.principal is None else notes.principal.tenant_id,
            NO_LABEL if notes.model is None else notes.model.name,
            protocol="grpc",
            status=status.name,
            code=code,
            seconds=seconds,
        )


def _ended(context: Context) -> tuple[grpc.StatusCode, str]:
    """How a call the client ended is counted: past its deadline, or cancelled."""
    left = context.time_remaining()
    status = (
        grpc.StatusCode.DEADLINE_EXCEEDED
        if left is not None and left <= 0
        else grpc.StatusCode.CANCELLED
    )
    return status, status.name


def _parsed(kind: type[Request], raw: bytes) -> Request:
    try:
        return kind.FromString(raw)
    except DecodeError as e:
        error = InferMalformed if kind is pb.ModelInferRequest else BadRequest
        raise error(
            f"expected a {kind.DESCRIPTOR.name} message, got bytes protobuf cannot parse: {e}"
        ) from None


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _tensor(meta: Mapping[str, Any]) -> pb.ModelMetadataResponse.TensorMetadata:
    return pb.ModelMetadataResponse.TensorMetadata(
        name=meta["name"], datatype=meta["datatype"], shape=meta["shape"]
    )
