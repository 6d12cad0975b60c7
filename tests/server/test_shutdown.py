"""Process faults of a real `graphgate serve`: SIGTERM drains in-flight requests within the grace
period (new connections refused, exit 0), and an upload SIGKILLed after its first artifact was
written leaves no model and no artifact once the server is back (orphans swept at start)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from server.storage.artifacts import TMP_PREFIX
from tests.support.api import auth, post_tenant
from tests.support.builders import Built, affine, mlp
from tests.support.served import Server
from tests.support.uploads import AFFINE, post_model, upload_files

# 2 x 16 MiB of weights: writing and fsyncing them (and the ONNX) after the small program's
# artifact gives a kill a window of tens of milliseconds between the first artifact and the row.
BIG = mlp((2048, 2048, 2048)).built()
# Measured at a load average of 2: SIGTERM to refusing connections 0.07 s, the last drained
# answer to exit 0.27 s, a 1 s grace with a request that never ends to exit 1.4 s. The tests
# wait ten times that or more; what they tell apart (the 60 s grace, a 300 s body timeout)
# lies far beyond.
REFUSING_WITHIN_S = 10
DRAINED_EXIT_WITHIN_S = 20
GRACE_EXIT_WITHIN_S = 20


@pytest.fixture
def server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend_env: dict[str, str]
) -> Iterator[Server]:
    # Far beyond DRAINED_EXIT_WITHIN_S: a server that waited out its grace would fail the wait.
    monkeypatch.setenv("GRAPHGATE_SHUTDOWN_GRACE_S", "60")
    monkeypatch.setenv("GRAPHGATE_ARTIFACT_GC_GRACE_S", "0")  # its orphans are seconds old
    s = Server(tmp_path / "data", backend_env)
    s.start()
    yield s
    s.stop(signal.SIGKILL)


def _send_head_and_half(server: Server, head: bytes, body: bytes) -> tuple[socket.socket, bytes]:
    """Opens a connection and sends a request's head and half its body; returns the socket and
    the rest of the body."""
    s = socket.create_connection(("127.0.0.1", server.port))
    s.settimeout(30)
    half = len(body) // 2
    s.sendall(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:half])
    return s, body[half:]


def _finish(s: socket.socket, rest: bytes) -> tuple[int, bytes]:
    """Sends the rest of the body; returns the status and body of the answer (read to close)."""
    with s:
        s.sendall(rest)
        out = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _refused(server: Server) -> bool:
    try:
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    except OSError:
        return True
    return False


def _multipart(name: str, built: Built) -> bytes:
    return (
        b'--xx\r\nContent-Disposition: form-data; name="name"\r\n\r\n' + name.encode() + b"\r\n"
        b'--xx\r\nContent-Disposition: form-data; name="program"; filename="p"\r\n\r\n'
        + built.program
        + b'\r\n--xx\r\nContent-Disposition: form-data; name="params"; filename="q"\r\n\r\n'
        + (built.params or b"")
        + b"\r\n--xx--\r\n"
    )


def test_sigterm_drains_in_flight_requests_refuses_new_ones_and_exits_0(server: Server) -> None:
    key = post_tenant(server, "acme")
    assert post_model(server, key).status_code == 201
    infer = json.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    ).encode()
    auth_line = f"Authorization: Bearer {key}\r\nHost: x\r\n".encode()
    inferring = _send_head_and_half(
        server,
        b"POST /v2/models/m/infer HTTP/1.1\r\n" + auth_line + b"Content-Type: application/json\r\n",
        infer,
    )
    uploading = _send_head_and_half(
        server,
        b"POST /v1/models HTTP/1.1\r\n"
        + auth_line
        + b"Content-Type: multipart/form-data; boundary=xx\r\n",
        _multipart("late", affine(8).built()),
    )
    time.sleep(0.5)  # both heads read: the requests are in flight
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)

    deadline = time.monotonic() + REFUSING_WITHIN_S
    while not _refused(server):
        assert time.monotonic() < deadline, "still accepting connections after SIGTERM"
        time.sleep(0.1)
    assert server.process.poll() is None  # still draining

    status, body = _finish(*inferring)
    assert status == 200, body
    assert json.loads(body)["outputs"][0]["shape"] == [1, 4]
    status, body = _finish(*uploading)
    assert status == 201, body
    assert server.process.wait(timeout=DRAINED_EXIT_WITHIN_S) == 0  # drained: not the grace

    server.start()  # what the drained upload stored is there after the restart
    got = httpx2.get(f"{server.url}/v1/models/late", headers=auth(key))
    assert got.status_code == 200 and got.json()["latest_version"] == 1


def test_sigterm_exits_after_the_grace_period_when_a_request_never_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend_env: dict[str, str]
) -> None:
    monkeypatch.setenv("GRAPHGATE_SHUTDOWN_GRACE_S", "1")
    monkeypatch.setenv("GRAPHGATE_BODY_TIMEOUT_S", "300")  # the stuck request never ends here
    server = Server(tmp_path / "data", backend_env)
    server.start()
    try:
        key = post_tenant(server, "acme")
        stuck, _ = _send_head_and_half(
            server,
            f"POST /v1/check HTTP/1.1\r\nAuthorization: Bearer {key}\r\nHost: x\r\n".encode()
            + b"Content-Type: multipart/form-data; boundary=xx\r\n",
            _multipart("x", AFFINE),
        )
        time.sleep(0.5)
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        # the 1 s grace, the workers' stop and the interpreter's exit; not the body timeout
        assert server.process.wait(timeout=GRACE_EXIT_WITHIN_S) == 0
        stuck.close()
    finally:
        server.stop(signal.SIGKILL)


def _artifact(data_dir: Path, data: bytes) -> Path:
    sha = hashlib.sha256(data).hexdigest()
    return data_dir / "artifacts" / sha[:2] / sha


@pytest.mark.embedded_only  # reads the artifacts folder (S3: tests/server/test_backends.py)
def test_upload_sigkilled_after_its_first_artifact_leaves_nothing_after_restart(
    server: Server,
) -> None:
    key = post_tenant(server, "acme")
    program = _artifact(server.data_dir, BIG.program)
    params = _artifact(server.data_dir, BIG.params or b"")
    files = upload_files(BIG)
    request = httpx2.Request(
        "POST", f"{server.url}/v1/models", data={"name": "big"}, files=files, headers=auth(key)
    )
    with httpx2.Client(timeout=60) as client:
        thread = threading.Thread(target=_send_quietly, args=(client, request))
        thread.start()
        deadline = time.monotonic() + 60
        while not program.exists():  # the upload compiled and wrote its first artifact
            assert time.monotonic() < deadline, "the upload never stored its program"
            time.sleep(0.001)
        assert server.process is not None
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=10)
        thread.join(30)
    assert program.exists()  # the kill came between the artifacts and the row

    server.start()
    assert httpx2.get(f"{server.url}/v1/models/big", headers=auth(key)).status_code == 404
    assert not program.exists() and not params.exists()
    stored = list((server.data_dir / "artifacts").glob("*/*"))
    assert [p for p in stored if p.name.startswith(TMP_PREFIX)] == []
    assert stored == []  # this tenant's only upload never registered: nothing stays
    assert post_model(server, key, built=BIG).status_code == 201  # the same upload succeeds now


def _send_quietly(client: httpx2.Client, request: httpx2.Request) -> None:
    with contextlib.suppress(httpx2.HTTPError):
        client.send(request)
