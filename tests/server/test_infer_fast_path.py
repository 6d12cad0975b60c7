"""The V2 infer endpoint's fast path (server/http/fast_path.py) and the head written with the
body (server/http/limits.py). The behaviour through the fast path (body caps, metrics, error
codes, disconnects) is asserted end to end by test_v2_routes, test_metrics, test_limits and
test_disconnect, which all go through it; these check what only it adds: it takes exactly the
requests the router would give the infer endpoint, and its 500 safety net."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from uvicorn import Config
from uvicorn.server import ServerState

from server.errors import NotFound
from server.http import errors
from server.http.fast_path import InferFastPath, infer_path_params
from server.http.limits import HttpLimits, protocol_class
from server.main import create_app
from server.routes import inference
from server.settings import Settings


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v2/models/m/infer", {"name": "m"}),
        ("/v2/models/m.v-1/versions/12/infer", {"name": "m.v-1", "version": "12"}),
        ("/v2/models/m/versions/x/infer", {"name": "m", "version": "x"}),  # 400 in the route
        ("/v2/models/m/infer/", None),  # the router redirects it
        ("/v2/models/a/b/infer", None),
        ("/v2/models/m/ready", None),
        ("/v2/models//infer", None),
        ("/v1/models/m/infer", None),
    ],
)
def test_infer_paths_and_their_parameters(path: str, expected: dict[str, str] | None) -> None:
    assert infer_path_params(path) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/m/infer",
        "/v2/models/m/versions/3/infer",
        "/v2/models/infer/infer",
        "/v2/models/versions/versions/versions/infer",
        "/v2/models/m/infer/",
        "/v2/models/m/versions/3/infer/",
        "/v2/models/m",
        "/v2/models/m/versions/3",
        "/v2/health/ready",
    ],
)
def test_the_fast_path_takes_what_the_router_gives_the_infer_endpoint(
    tmp_path: Path, path: str
) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data"))
    assert (_routed_endpoint(app, path) is inference.infer) == (infer_path_params(path) is not None)


def _routed_endpoint(app: FastAPI, path: str) -> Any:
    """The endpoint the app's router sends `POST path` to (Starlette notes it in the scope);
    without the app's lifespan the endpoint itself may fail, which does not matter here."""
    scope: dict[str, Any] = {
        "type": "http", "method": "POST", "path": path, "root_path": "", "headers": [],
        "query_string": b"", "app": app,
    }  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    with contextlib.suppress(Exception):
        asyncio.run(app.router(scope, receive, send))
    return scope.get("endpoint")


def _fast_path_app(tmp_path: Path, endpoint: Any) -> tuple[InferFastPath, FastAPI]:
    """The fast path in front of a real app's stack, with the real error table, around
    `endpoint` (what the infer endpoint would raise)."""
    settings = Settings(data_dir=tmp_path / "data", admin_token=SecretStr("t" * 40))
    app = create_app(settings)
    fast = InferFastPath(app.build_middleware_stack(), endpoint, app.exception_handlers)

    async def with_app_in_scope(scope: Any, receive: Any, send: Any) -> None:
        scope["app"] = app
        await fast(scope, receive, send)

    return with_app_in_scope, app  # type: ignore[return-value]


async def _post(asgi: Any, path: str, raise_app_exceptions: bool = True) -> httpx.Response:
    transport = httpx.ASGITransport(app=asgi, raise_app_exceptions=raise_app_exceptions)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post(path, content=b"{}")


def test_an_unexpected_error_is_a_500_without_a_traceback_and_reaches_the_server(
    tmp_path: Path,
) -> None:
    async def broken(request: Request) -> Response:
        raise RuntimeError("secret detail from deep inside")

    asgi, app = _fast_path_app(tmp_path, broken)
    answer = asyncio.run(_post(asgi, "/v2/models/m/infer", raise_app_exceptions=False))
    assert answer.status_code == 500
    assert answer.json() == {"error": "internal server error", "code": errors.INTERNAL[0]}
    assert "secret" not in answer.text
    # As after the full stack: the error goes on to uvicorn (logged, connection closed).
    with pytest.raises(RuntimeError, match="secret detail"):
        asyncio.run(_post(asgi, "/v2/models/m/infer"))
    text = app.state.metrics.registry  # the 500s are counted as INTERNAL
    from prometheus_client import generate_latest

    exposed = generate_latest(text).decode()
    assert 'code="INTERNAL"' in exposed
    assert 'status="500"' in exposed


def test_a_domain_error_is_answered_from_the_one_table(tmp_path: Path) -> None:
    async def missing(request: Request) -> Response:
        raise NotFound(f"expected a model named {request.path_params['name']!r}, got none")

    asgi, _app = _fast_path_app(tmp_path, missing)
    answer = asyncio.run(_post(asgi, "/v2/models/absent/infer"))
    assert answer.status_code == errors.status_of(NotFound) == 404
    assert answer.json() == {
        "error": "expected a model named 'absent', got none",
        "code": NotFound.code,
    }


# -- the head written with the body --------------------------------------------------------


class _Wire:
    """What uvicorn's protocol writes to the socket, write by write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        self.writes.append(b"".join(chunks))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _writes_for(app: Any, method: str) -> list[bytes]:
    return (await _served(app, method))[0]


async def _served(app: Any, method: str) -> tuple[list[bytes], weakref.ref[Any]]:
    """What the protocol wrote for one request, and a weak reference to the request's cycle
    (the protocol is gone once this returns)."""
    limits = HttpLimits(65536, 100, 8192, 10.0, 10.0)
    protocol_type = protocol_class(limits)
    config = Config(app, http=protocol_type, lifespan="off", access_log=False)
    config.load()
    protocol = protocol_type(config=config, server_state=ServerState(), app_state={})
    wire = _Wire()
    protocol.connection_made(wire)  # type: ignore[arg-type]
    protocol.data_received(f"{method} / HTTP/1.1\r\nhost: test\r\n\r\n".encode())
    for _ in range(100):
        await asyncio.sleep(0.001)
        if protocol.cycle is not None and protocol.cycle.response_complete:
            break
    cycle = weakref.ref(protocol.cycle)
    protocol.connection_lost(None)
    return wire.writes, cycle


async def _json(scope: Any, receive: Any, send: Any) -> None:
    await Response(b'{"ok": true}', media_type="application/json")(scope, receive, send)


async def _streamed(scope: Any, receive: Any, send: Any) -> None:
    async def chunks() -> Any:
        yield b"one"
        yield b"two"

    await StreamingResponse(chunks())(scope, receive, send)


def test_a_response_with_a_length_leaves_in_one_write() -> None:
    (write,) = asyncio.run(_writes_for(_json, "GET"))
    head, _, body = write.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"content-length: 12" in head
    assert body == b'{"ok": true}'


def test_a_streamed_response_writes_its_head_first_and_head_only_answers_have_no_body() -> None:
    head, *chunks = asyncio.run(_writes_for(_streamed, "GET"))
    assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert b"".join(chunks) == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"
    (only,) = asyncio.run(_writes_for(_json, "HEAD"))
    assert only.startswith(b"HTTP/1.1 200 OK") and only.endswith(b"\r\n\r\n")
    assert b"content-length: 12" in only


def test_an_answered_request_leaves_no_reference_cycle() -> None:
    """The cycle that writes the head with the body is freed when its request is answered,
    without the garbage collector (a cycle per request made its full collections pause the
    event loop for ~100 ms under load)."""
    gc.disable()
    try:
        writes, cycle = asyncio.run(_served(_json, "POST"))
        assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200 OK")
        assert cycle() is None
    finally:
        gc.enable()
