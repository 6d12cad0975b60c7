"""HTTP abuse against a real `graphgate serve`: caps and timeouts answered by the server's own
protocol (server/http/limits.py), and malformed requests answered 4xx with their codes."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest

from tests.support.api import auth, post_tenant
from tests.support.served import Server
from tests.support.uploads import post_model

SHORT = {
    "GRAPHGATE_KEEP_ALIVE_TIMEOUT_S": "1",
    "GRAPHGATE_HEADER_TIMEOUT_S": "2",
    "GRAPHGATE_BODY_TIMEOUT_S": "1",
}
# How long the tests wait for what is due within SHORT's timeouts (2 s at most) or at once: over
# ten times that, so that a loaded machine is never mistaken for a server that did not answer.
WAIT_S = 30.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    with Server(Path(tmp_path_factory.mktemp("abuse")) / "data", SHORT) as server:
        key = post_tenant(server, "acme")
        assert post_model(server, key).status_code == 201
        yield server, key


def _raw(server: Server, data: bytes, wait_s: float = WAIT_S) -> tuple[bytes, float]:
    """Sends `data` on a fresh connection; returns what came back until close, and when the
    first byte of it came (seconds after the send began)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(wait_s)
        with contextlib.suppress(OSError):  # refused mid-send: the answer is already waiting
            s.sendall(data)
        out, first = b"", None
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                first = first or time.monotonic() - started
                out += chunk
    return out, first if first is not None else time.monotonic() - started


def _infer_body() -> dict[str, object]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def _until(done: Callable[[], bool], what: str) -> None:
    """Waits for progress, not for a time: the deadline only stops a test that would hang."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_16_mib_header_is_431_while_others_are_served(served: tuple[Server, str]) -> None:
    """Progress and order, not time: the 16 MiB head is refused 431 with its code, and another
    client's inferences on a kept-alive connection are answered 200 before it and go on being
    answered after it. How long those inferences take meanwhile (their p50/p99 next to the
    same client's idle figures) is measured by benchmarks/bench_fairness.py (`--head-abuse`;
    benchmarks/results/fairness.md)."""
    server, key = served
    statuses: list[int] = []  # asserted here: an assert inside the thread would only warn
    stop, warm = threading.Event(), threading.Event()

    def small_inferences() -> None:
        with httpx2.Client(base_url=server.url, headers=auth(key)) as client:
            for _ in range(20):  # warm: the model loaded, the connection open
                client.post("/v2/models/m/infer", json=_infer_body())
            warm.set()
            while not stop.is_set():
                statuses.append(client.post("/v2/models/m/infer", json=_infer_body()).status_code)
                # NOTE: paced at about 200/s, the tenant's default rate: unpaced, a fast machine
                # ran into RATE_LIMITED (429).
                time.sleep(0.005)

    worker = threading.Thread(target=small_inferences)
    worker.start()
    try:
        assert warm.wait(WAIT_S)
        _until(lambda: len(statuses) >= 20, "the inferences before the big head were not answered")
        head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (16 << 20)
        answer, _ = _raw(server, head + b"\r\n\r\n")
        answered_before = len(statuses)
        _until(
            lambda: len(statuses) >= answered_before + 20,
            "the inferences stopped being answered after the big head",
        )
    finally:
        stop.set()
        worker.join(WAIT_S)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
    assert b'"HEADER_TOO_LARGE"' in answer
    assert set(statuses) == {200}, sorted(set(statuses))


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (
            b"GET /v2/health/live HTTP/1.1\r\n" + b"X-A: 1\r\n" * 200 + b"\r\n",
            431,
            "TOO_MANY_HEADERS",
        ),
        (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n", 414, "REQUEST_LINE_TOO_LONG"),
        (b"GET /v2/health/live HTTP/1.1\r\nHost", 408, "HEADER_TIMEOUT"),
    ],
)
def test_heads_over_their_caps_or_too_slow_get_their_code(
    served: tuple[Server, str], request_bytes: bytes, status: int, code: str
) -> None:
    answer, _ = _raw(served[0], request_bytes)
    assert answer.startswith(f"HTTP/1.1 {status}".encode()), answer[:100]
    assert f'"{code}"'.encode() in answer


def test_a_slow_body_is_408_and_frees_its_slot(served: tuple[Server, str]) -> None:
    server, key = served
    head = (
        f"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    ).encode()
    answer, seconds = _raw(server, head)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
    assert b'"BODY_TIMEOUT"' in answer
    # Answered by the 1 s body timeout: never before it (load only delays), and within 15 s,
    # over ten times the timeout, so that only a body that was waited for without a timer fails.
    assert 0.9 < seconds < 15
    # the tenant's concurrency slots are all free again: 32 parallel requests succeed
    with httpx2.Client(base_url=server.url, headers=auth(key)) as client:
        results: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: results.append(
                    client.post("/v2/models/m/infer", json=_infer_body()).status_code
                )
            )
            for _ in range(32)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert results == [200] * 32


def test_idle_connections_are_closed_after_the_idle_timeout(served: tuple[Server, str]) -> None:
    server, _key = served
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(200)]
    try:
        # Each is read until the server closes it (the 1 s keep-alive timeout), all within
        # WAIT_S: over ten times the timeout, so only a connection never closed fails.
        deadline = time.monotonic() + WAIT_S
        closed = 0
        for s in sockets:
            s.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                closed += s.recv(1) == b""
            except TimeoutError:
                pass  # still open at the deadline
            except OSError:
                closed += 1  # reset by the server: closed too
        assert closed == 200
    finally:
        for s in sockets:
            s.close()


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        (
            "/v2/models/m/versions/\u00b2/infer",
            b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}',
            400,
            "BAD_REQUEST",
        ),
        ("/v2/models/m/versions/\u00b2", None, 400, "BAD_REQUEST"),
        (
            "/v2/models/m/infer",
            b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1'
            + b"0" * 5000
            + b",2,3,4]}]}",
            400,
            "INFER_MALFORMED",
        ),
        (
            "/v2/models/m/infer",
            b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,true,3,4]}]}',
            400,
            "INFER_DATA",
        ),
        ("/v2/models/m/infer", b"[" * 100 + b"]" * 100, 400, "INFER_MALFORMED"),
        (
            "/v2/models/m/infer",
            b'{"inputs":' + b"[" * 100 + b"]" * 100 + b"}",
            400,
            "INFER_MALFORMED",
        ),
    ],
)
def test_faults_are_4xx_with_their_code(
    served: tuple[Server, str], path: str, body: bytes | None, status: int, code: str
) -> None:
    server, key = served
    with httpx2.Client(base_url=server.url, headers=auth(key)) as client:
        if body is None:
            response = client.get(path)
        else:
            response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert response.json()["code"] == code


def _check_head(key: str, length: int, expect: bool = False) -> bytes:
    return (
        f"POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\n"
        + ("Expect: 100-continue\r\n" if expect else "")
        + f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_a_check_over_the_tenants_cap_is_refused_before_its_body_is_sent(
    served: tuple[Server, str],
) -> None:
    """A client that asks first (`Expect: 100-continue`, as curl does for large bodies) is
    refused 429 without sending a byte of its body: a flood of refused uploads then costs the
    server (and the CPUs the other tenants share) no bodies."""
    server, key = served
    holders = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]  # the cap
    stop = threading.Event()

    def trickle() -> None:  # a byte every 0.3 s: within the 1 s body timeout, slots stay held
        while not stop.wait(0.3):
            for s in holders:
                with contextlib.suppress(OSError):
                    s.sendall(b"x")  # the program's bytes, never finished

    try:
        part = b'--b\r\nContent-Disposition: form-data; name="program"\r\n\r\n'
        for s in holders:
            s.sendall(_check_head(key, 100_000) + part)
        keeper = threading.Thread(target=trickle)
        keeper.start()
        deadline = time.monotonic() + 10
        while b" 429 " not in _raw(server, _check_head(key, 0), wait_s=5)[0].split(b"\r\n")[0]:
            assert time.monotonic() < deadline, "the tenant's compile slots never filled"
        with socket.create_connection(("127.0.0.1", server.port)) as asker:
            asker.settimeout(5)
            asker.sendall(_check_head(key, 195_000, expect=True))  # no body unless asked for it
            answer = asker.recv(65536)
        assert answer.startswith(b"HTTP/1.1 429"), answer[:100]
        assert b"100 Continue" not in answer
        assert b'"TOO_MANY_COMPILES"' in answer
    finally:
        stop.set()
        for s in holders:
            s.close()


def test_an_admitted_check_that_asks_first_is_told_to_send_its_body(
    served: tuple[Server, str],
) -> None:
    server, key = served
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(5)
        s.sendall(_check_head(key, 4, expect=True))
        assert s.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(b"----")  # not a multipart body: refused, once read
        assert s.recv(65536).startswith(b"HTTP/1.1 400")
