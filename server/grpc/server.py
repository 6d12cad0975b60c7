"""The gRPC endpoint: grpcio's asyncio server on the app's event loop, beside the REST server.

Started by the app's lifespan (server/main.py) once the services are up, so both protocols share
one process: the same worker pool, batchers, caches and limits (`app.state`). Its caps are set
in grpcio's core, where the bytes arrive:

- a message: GRAPHGATE_MAX_INFER_BYTES, checked by the handlers (PAYLOAD_TOO_LARGE); the core
  refuses anything past it by more than MESSAGE_SLACK_BYTES (RESOURCE_EXHAUSTED, no code: no
  handler runs), so memory per call stays bounded even before a handler reads the message;
- metadata: GRAPHGATE_MAX_HEADERS entries and GRAPHGATE_MAX_HEADER_BYTES bytes, checked by the
  handlers (TOO_MANY_HEADERS, HEADER_TOO_LARGE); the core refuses metadata past
  METADATA_CORE_FACTOR times the byte cap (RESOURCE_EXHAUSTED, no code);
- calls in flight on one connection: GRAPHGATE_GRPC_MAX_STREAMS, advertised in HTTP/2 SETTINGS;
  a stream over it is reset with REFUSED_STREAM (the client sees UNAVAILABLE and may retry).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Final

import grpc
from grpc import aio

from server.grpc.health import HealthService
from server.grpc.service import NAME, InferenceService
from server.settings import Settings

log = logging.getLogger("graphgate.server")

MESSAGE_SLACK_BYTES: Final = 1024 * 1024
# HPACK-decoded metadata the core accepts before a handler can count it: room for a client that
# sends 10,000 tiny entries to be answered with a code (TOO_MANY_HEADERS) rather than a reset.
METADATA_CORE_FACTOR: Final = 8


@dataclass(slots=True)
class Endpoint:
    """A started gRPC endpoint: the server, its health service, the port it listens on, the
    event loop it runs on and, once begun, its graceful stop."""

    server: aio.Server
    health: HealthService
    port: int
    loop: asyncio.AbstractEventLoop
    stopping: asyncio.Task[None] | None = None


def options(settings: Settings) -> list[tuple[str, Any]]:
    """grpcio's channel arguments for the server, from the settings."""
    metadata_bytes = METADATA_CORE_FACTOR * settings.max_header_bytes
    return [
        ("grpc.max_receive_message_length", settings.max_infer_bytes + MESSAGE_SLACK_BYTES),
        ("grpc.max_concurrent_streams", settings.grpc_max_streams),
        # soft and hard alike: between the two the core refuses at random
        ("grpc.max_metadata_size", metadata_bytes),
        ("grpc.absolute_max_metadata_size", metadata_bytes),
        # NOTE: grpcio sets SO_REUSEPORT by default: a second server would share the port
        # silently; a port in use must fail the start instead.
        ("grpc.so_reuseport", 0),
    ]


async def start(state: Any, settings: Settings) -> Endpoint | None:
    """Starts the endpoint on `host:grpc_port` (None when the port is 0: off)."""
    if settings.grpc_port == 0:
        return None
    server = aio.server(options=options(settings))
    health = HealthService((NAME,))
    server.add_generic_rpc_handlers((InferenceService(state).handler(), health.handler()))
    address = _address(settings.host, settings.grpc_port)
    credentials = _credentials(settings)
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
    await server.start()
    scheme = "plaintext" if credentials is None else "TLS"
    log.info("gRPC (KServe V2) listening on %s (%s)", address, scheme)
    return Endpoint(server, health, port, asyncio.get_running_loop())


def begin_stop(endpoint: Endpoint, grace_s: float) -> None:
    """Starts the graceful stop from any thread (`graphgate serve`'s SIGTERM handler: gRPC
    drains while HTTP does, within the same grace period, not after it)."""
    endpoint.loop.call_soon_threadsafe(_stopping, endpoint, grace_s)


async def stop(endpoint: Endpoint, grace_s: float) -> None:
    """Stops accepting calls and gives those in flight `grace_s` to finish (once: a stop begun
    earlier is waited for)."""
    await _stopping(endpoint, grace_s)


def _stopping(endpoint: Endpoint, grace_s: float) -> asyncio.Task[None]:
    if endpoint.stopping is None:
        endpoint.health.shut_down()  # NOT_SERVING: balancers stop sending calls here
        endpoint.stopping = endpoint.loop.create_task(endpoint.server.stop(grace_s))
    return endpoint.stopping


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _credentials(settings: Settings) -> grpc.ServerCredentials | None:
    if settings.grpc_tls_cert is None or settings.grpc_tls_key is None:
        return None
    chain = settings.grpc_tls_cert.read_bytes()
    key = settings.grpc_tls_key.read_bytes()
    client_ca = None
    if settings.grpc_tls_client_ca is not None:
        client_ca = settings.grpc_tls_client_ca.read_bytes()
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )
