"""A refused upload or check costs a header's worth of work: the key and the tenant's compile
slot are checked before the multipart body is read (server/routes/models.py), and the
connection stays usable after a refusal whose body was never read.

Against a real `graphgate serve` (uvicorn's own connection handling is what is tested), over
raw sockets: a client that sends a head and never its body gets its 429 at once.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import httpx2
import pytest

from server.services.limits import CompileQueue, Overloaded, TooManyCompiles
from tests.support.api import auth, post_tenant
from tests.support.served import Server
from tests.support.uploads import AFFINE, upload_files

# The body deadline is far beyond the socket's: an answer that waited for the body never came
# would be a timeout here, not a 408 there.
BODY_TIMEOUT_S: Final = 120
ANSWER_WITHIN_S: Final = 20.0
BOUNDARY: Final = "refusal-test-boundary"
ROUTES: Final = ("/v1/check", "/v1/models")


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        document: dict[str, object] = json.loads(self.body)
        return document


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A server where each tenant compiles one upload or check at a time."""
    env = {
        "GRAPHGATE_TENANT_MAX_CONCURRENT_UPLOADS": "1",
        "GRAPHGATE_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
    }
    with Server(tmp_path_factory.mktemp("refusal") / "data", env) as server:
        yield server, post_tenant(server, "tenant-a")


def multipart(path: str) -> bytes:
    """The form the route takes: `program` (and `name` for an upload)."""
    parts = []
    if path == "/v1/models":
        parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\nm\r\n')
    parts.append(
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; "
        'name="program"; filename="p.pdmodel"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    return "".join(parts).encode() + AFFINE.program + f"\r\n--{BOUNDARY}--\r\n".encode()


def head(path: str, key: str, content_length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        f"Content-Length: {content_length}\r\n\r\n"
    ).encode()


def connect(server: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_WITHIN_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_answer(sock: socket.socket) -> Answer:
    """One HTTP/1.1 response with a Content-Length body, read off the socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection mid-head: {data!r}"
        data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = raw_head.decode("latin-1").split("\r\n")
    headers = {n.strip().lower(): v.strip() for n, _, v in (x.partition(":") for x in lines)}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    return Answer(int(status_line.split()[1]), headers, body[:length])


def hold_the_slot(server: Server, key: str) -> socket.socket:
    """A check whose body never comes: it holds the tenant's only compile slot. Confirmed by a
    whole check being refused; until then (the route not reached yet) tried again."""
    body = multipart("/v1/check")
    deadline = time.monotonic() + ANSWER_WITHIN_S
    while time.monotonic() < deadline:
        holder = connect(server)
        holder.sendall(head("/v1/check", key, len(body)))
        time.sleep(0.2)
        with connect(server) as probe:
            probe.sendall(head("/v1/check", key, len(body)) + body)
            if read_answer(probe).status == 429:
                return holder
        holder.close()
    raise AssertionError("the body-less check never took the tenant's compile slot")


@pytest.mark.parametrize("path", ROUTES)
def test_a_refused_upload_is_answered_before_its_body_is_sent(
    served: tuple[Server, str], path: str
) -> None:
    server, key = served
    with hold_the_slot(server, key), connect(server) as client:
        body = multipart(path)
        started = time.monotonic()
        client.sendall(head(path, key, len(body)))  # the head only: the body never comes
        answer = read_answer(client)  # a socket timeout here: the server waited for the body
        waited_s = time.monotonic() - started
    assert answer.status == 429, answer.body
    assert answer.json()["code"] == "TOO_MANY_COMPILES"
    assert int(answer.headers["retry-after"]) >= 1
    assert waited_s < ANSWER_WITHIN_S


@pytest.mark.parametrize("path", ROUTES)
def test_the_connection_serves_the_next_request_after_a_refusal_with_an_unread_body(
    served: tuple[Server, str], path: str
) -> None:
    server, key = served
    with hold_the_slot(server, key), connect(server) as client:
        body = multipart(path)
        client.sendall(head(path, key, len(body)) + body)
        refused = read_answer(client)
        # the same connection: the refused body's bytes must not be read as the next request
        client.sendall(
            f"GET /v1/models HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
        )
        listed = read_answer(client)
    assert refused.status == 429, refused.body
    assert refused.json()["code"] == "TOO_MANY_COMPILES"
    assert listed.status == 200, listed.body
    assert "models" in listed.json()


def test_the_slot_is_back_once_the_body_less_check_leaves(served: tuple[Server, str]) -> None:
    server, key = served
    hold_the_slot(server, key).close()  # a client leaving mid-body releases what it held
    files = upload_files(AFFINE)
    deadline = time.monotonic() + ANSWER_WITHIN_S
    with httpx2.Client(base_url=server.url, headers=auth(key), timeout=60) as client:
        while (answer := client.post("/v1/check", files=files)).status_code == 429:
            assert time.monotonic() < deadline, "the tenant's compile slot never came back"
            time.sleep(0.05)
    assert answer.status_code == 200, answer.text
    assert answer.json()["valid"] is True


def test_the_form_is_still_documented(served: tuple[Server, str]) -> None:
    server, key = served
    doc = httpx2.get(f"{server.url}/v1/openapi.json", headers=auth(key)).json()
    for path, required in (("/v1/models", ["name", "program"]), ("/v1/check", ["program"])):
        body = doc["paths"][path]["post"]["requestBody"]
        schema = body["content"]["multipart/form-data"]["schema"]
        assert body["required"] is True
        assert schema["required"] == required
        assert schema["properties"]["program"]["format"] == "binary"
        assert "params" in schema["properties"]


# -- CompileQueue.admitted on its own: what a body still streaming holds -------------------------


def test_a_streaming_body_holds_its_tenants_slot_not_a_place_of_the_server() -> None:
    queue = CompileQueue(threads=1, per_tenant=1, total=1)
    try:
        with queue.admitted("a"):  # a's body still streaming
            assert (queue.slots.in_flight("a"), queue.slots.in_flight_total()) == (1, 0)
            refused = pytest.raises(
                TooManyCompiles, match="expected at most 1 uploads, checks and model loads"
            )
            with refused, queue.admitted("a"):
                pytest.fail("a second body of a tenant at its cap was admitted")
            # another tenant's compile takes the server's one place meanwhile
            assert asyncio.run(queue.run("b", lambda: "b compiled")) == "b compiled"
        assert (queue.slots.in_flight("a"), queue.slots.in_flight_total()) == (0, 0)
    finally:
        queue.shutdown()


def test_a_body_read_while_the_server_filled_up_is_503_and_leaks_nothing() -> None:
    queue = CompileQueue(threads=1, per_tenant=2, total=1)
    try:
        queue.slots.acquire("b")  # b's compile holds the server's one place
        full = pytest.raises(Overloaded, match=r"expected at most 1 .* on this server, got 2")
        with full, queue.admitted("a") as admission:
            asyncio.run(admission.run(lambda: "never"))
        queue.slots.release("b")
        assert (queue.slots.in_flight("a"), queue.slots.in_flight_total()) == (0, 0)
        with queue.admitted("a") as admission:
            assert asyncio.run(admission.run(lambda: 42)) == 42
        assert queue.slots.in_flight_total() == 0
    finally:
        queue.shutdown()
