"""`grpc.health.v1.Health`: the standard gRPC health service, for probes and load balancers.

The whole server ("") and the inference service are SERVING from start until shutdown begins,
then NOT_SERVING (a balancer stops sending calls while those in flight finish), as the REST
server's /v2/health routes answer. Check on another service name is NOT_FOUND, as the protocol
says; Watch answers SERVICE_UNKNOWN for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError
from grpc import aio

from server.grpc import health_pb2 as pb

NAME: Final = "grpc.health.v1.Health"
Status = pb.HealthCheckResponse.ServingStatus
Context = aio.ServicerContext[Any, Any]


class HealthService:
    def __init__(self, services: tuple[str, ...]) -> None:
        self._known = frozenset({"", *services})
        self._serving = True
        self._changed = asyncio.Event()

    def shut_down(self) -> None:
        """Shutdown has begun: every service is NOT_SERVING from now on."""
        self._serving = False
        self._changed.set()

    def handler(self) -> grpc.GenericRpcHandler:
        methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "Check": grpc.unary_unary_rpc_method_handler(
                self.check, request_deserializer=None, response_serializer=_serialize
            ),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self.watch, request_deserializer=None, response_serializer=_serialize
            ),
        }
        return grpc.method_handlers_generic_handler(NAME, methods)

    async def check(self, raw: bytes, context: Context) -> pb.HealthCheckResponse:
        service = await _service(raw, context)
        if service not in self._known:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {service[:100]!r}")
        return pb.HealthCheckResponse(status=self._status())

    async def watch(self, raw: bytes, context: Context) -> AsyncIterator[pb.HealthCheckResponse]:
        service = await _service(raw, context)
        if service not in self._known:
            yield pb.HealthCheckResponse(status=Status.SERVICE_UNKNOWN)
            return
        yield pb.HealthCheckResponse(status=self._status())
        if self._serving:  # the only change there will be: shutdown
            await self._changed.wait()
            yield pb.HealthCheckResponse(status=self._status())

    def _status(self) -> pb.HealthCheckResponse.ServingStatus.ValueType:
        return Status.SERVING if self._serving else Status.NOT_SERVING


async def _service(raw: bytes, context: Context) -> str:
    try:
        return pb.HealthCheckRequest.FromString(raw).service
    except DecodeError:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            "expected a HealthCheckRequest message, got bytes protobuf cannot parse",
            trailing_metadata=(("graphgate-code", "BAD_REQUEST"),),
        )
        raise AssertionError("unreachable: context.abort raises") from None


def _serialize(message: pb.HealthCheckResponse) -> bytes:
    return message.SerializeToString()
