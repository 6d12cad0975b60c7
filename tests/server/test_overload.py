"""Queues and their refusals: the compile queue's caps (429 TOO_MANY_COMPILES per tenant, 503
OVERLOADED with Retry-After in all), the global inference bound, a 60 MiB JSON body parsed once,
and a client that leaves mid multipart upload answered 499, not 400."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from server.main import create_app
from server.services.limits import (
    CompileQueue,
    FairPool,
    Overloaded,
    TooManyCompiles,
    compile_threads,
)
from server.v2 import codec
from tests.support.api import auth, new_tenant
from tests.support.backends import SettingsFactory
from tests.support.uploads import AFFINE, post_check, post_upload

# -- CompileQueue on its own ---------------------------------------------------------------------


def _blocked(queue: CompileQueue, tenant: str, gate: threading.Event) -> asyncio.Future[str]:
    """Starts a compile of `tenant` that holds its slot until `gate` is set."""

    def work() -> str:
        assert gate.wait(10)
        return threading.current_thread().name

    return asyncio.ensure_future(queue.run(tenant, work))


async def _settle() -> None:
    for _ in range(5):  # let the queued coroutines take their slots
        await asyncio.sleep(0)


def test_compile_queue_caps_each_tenant_then_all_and_frees_slots() -> None:
    async def scenario() -> None:
        queue = CompileQueue(threads=1, per_tenant=2, total=3)
        gate = threading.Event()
        a1, a2 = _blocked(queue, "a", gate), _blocked(queue, "a", gate)
        await _settle()
        # tenant a at its own cap: its own 429; tenant b is not affected by it
        with pytest.raises(
            TooManyCompiles, match="expected at most 2 uploads, checks and model loads"
        ):
            await queue.run("a", lambda: "never")
        b1 = _blocked(queue, "b", gate)
        await _settle()
        # three held in all (1 running, 2 waiting for the single thread): the server is full
        with pytest.raises(Overloaded, match=r"expected at most 3 .* on this server, got 4") as e:
            await queue.run("c", lambda: "never")
        assert e.value.retry_after_s >= 1
        gate.set()
        names = await asyncio.gather(a1, a2, b1)
        # compile work runs in the queue's own threads, never on the event loop
        assert all(name.startswith("graphgate-compile") for name in names), names
        assert queue.slots.in_flight_total() == 0
        assert await queue.run("c", lambda: 42) == 42

    asyncio.run(scenario())


def test_the_compile_pool_serves_tenants_fairly_not_in_arrival_order() -> None:
    pool = FairPool(1, "graphgate-compile")
    gate = threading.Event()
    order: list[str] = []

    def work(name: str) -> Callable[[], None]:
        def run() -> None:
            gate.wait(30)
            order.append(name)

        return run

    try:
        futures = [pool.submit("a", work(name)) for name in ("a1", "a2", "a3")]
        futures.append(pool.submit("b", work("b1")))  # after a's three, while a1 runs
        gate.set()
        for future in futures:
            future.result(30)
    finally:
        pool.shutdown()
    # a1 was running; then b's first before a's second: each tenant in its own order.
    assert order == ["a1", "b1", "a2", "a3"]


def test_compile_queue_releases_the_slot_of_work_that_fails() -> None:
    async def scenario() -> None:
        queue = CompileQueue(threads=1, per_tenant=1, total=1)

        def broken() -> None:
            raise ValueError("expected a program, got noise")

        for _ in range(3):  # a leaked slot would turn the second try into a 429
            with pytest.raises(ValueError, match="got noise"):
                await queue.run("a", broken)
        assert queue.slots.in_flight("a") == 0

    asyncio.run(scenario())


# -- through the app -----------------------------------------------------------------------------


@pytest.fixture
def app(make_settings: SettingsFactory) -> FastAPI:
    return create_app(make_settings(max_queued_compiles=1, max_queued_inferences=1))


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


def _infer_body(data: list[float]) -> dict[str, Any]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": data}]}


def test_a_full_compile_queue_is_503_overloaded_with_retry_after(
    app: FastAPI, client: TestClient
) -> None:
    key = new_tenant(client, "acme")
    compiles: CompileQueue = app.state.limits.compiles
    compiles.slots.acquire("another-tenant")  # its check, still compiling
    try:
        response = post_check(client, key)
    finally:
        compiles.slots.release("another-tenant")
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "OVERLOADED"
    assert int(response.headers["Retry-After"]) >= 1
    assert "expected at most 1 uploads, checks and model loads" in response.json()["error"]
    # the slot is back: the same check now compiles
    assert post_check(client, key).status_code == 200


def test_a_full_inference_queue_is_503_overloaded_with_retry_after(
    app: FastAPI, client: TestClient
) -> None:
    key = new_tenant(client, "acme")
    assert post_upload(client, key).is_success
    body = _infer_body([1, 2, 3, 4])
    app.state.limits.concurrency.acquire("another-tenant")  # its inference, in flight
    try:
        response = client.post("/v2/models/m/infer", json=body, headers=auth(key))
    finally:
        app.state.limits.concurrency.release("another-tenant")
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "OVERLOADED"
    assert int(response.headers["Retry-After"]) >= 1
    assert client.post("/v2/models/m/infer", json=body, headers=auth(key)).status_code == 200


# -- a 60 MiB JSON body is parsed once ------------------------------------------------------------


class _CountingOrjson:
    """orjson with its `loads` calls counted (the codec looks `orjson.loads` up per call)."""

    def __init__(self) -> None:
        self.calls = 0
        self.JSONDecodeError = orjson.JSONDecodeError

    def loads(self, raw: bytes) -> Any:
        self.calls += 1
        return orjson.loads(raw)


def test_a_60_mib_json_body_is_parsed_once(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = new_tenant(client, "acme")
    assert post_upload(client, key).is_success
    counting = _CountingOrjson()
    standard_calls: list[bytes] = []
    standard = codec._standard_loads

    def counted_standard(raw: bytes) -> Any:
        standard_calls.append(raw[:16])
        return standard(raw)

    monkeypatch.setattr(codec, "orjson", counting)
    monkeypatch.setattr(codec, "_standard_loads", counted_standard)
    # shape [1, 4] with 15 million values: orjson reads it, the codec refuses it
    data = b"1.5," * (15 * 1024 * 1024 - 1) + b"1.5"
    body = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[' + data + b"]}]}"
    assert len(body) > 60 * 1024 * 1024
    response = client.post(
        "/v2/models/m/infer",
        content=body,
        headers={**auth(key), "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text[:200]
    assert counting.calls == 1
    assert standard_calls == []
    # a small refused body is read again by the standard library: the counters do see both
    small = orjson.dumps(_infer_body([1, 2, 3]))
    response = client.post(
        "/v2/models/m/infer",
        content=small,
        headers={**auth(key), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert counting.calls == 2 and len(standard_calls) == 1


# -- a client that leaves mid multipart upload ----------------------------------------------------


def test_a_client_leaving_mid_multipart_upload_is_499_in_one_log_line(
    app: FastAPI, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    key = new_tenant(client, "acme")
    half = AFFINE.program[: len(AFFINE.program) // 2]
    parts = [
        b'--xx\r\nContent-Disposition: form-data; name="name"\r\n\r\nm\r\n',
        b'--xx\r\nContent-Disposition: form-data; name="program"; filename="p"\r\n\r\n' + half,
    ]
    headers = [
        (b"authorization", f"Bearer {key}".encode()),
        (b"content-type", b"multipart/form-data; boundary=xx"),
        (b"content-length", b"100000"),
        (b"host", b"testserver"),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/models",
        "raw_path": b"/v1/models",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
        "state": {},
    }
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": part, "more_body": True} for part in parts
    ]
    messages.append({"type": "http.disconnect"})
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    caplog.set_level(logging.INFO)
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 499
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert orjson.loads(body)["code"] == "CLIENT_DISCONNECTED"
    disconnects = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert len(disconnects) == 1 and disconnects[0].exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    models = client.get("/v1/models", headers=auth(key)).json()
    assert models == {"models": []}


@pytest.mark.parametrize(
    ("threads", "workers", "expected"), [(2, 2, 1), (2, 1, 1), (2, 3, 2), (4, 8, 4), (1, 8, 1)]
)
def test_compiles_leave_a_worker_to_inferences(threads: int, workers: int, expected: int) -> None:
    assert compile_threads(threads, workers) == expected
