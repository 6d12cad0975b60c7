"""The V2 routes over HTTP: metadata, readiness, inference, tenant scoping, errors and body caps."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from executor import SessionOptions, compile
from graph_proto.types import DType
from server.main import create_app
from server.settings import Settings
from tests.support.api import assert_error, auth, new_tenant
from tests.support.backends import SettingsFactory
from tests.support.builders import Built, GraphBuilder, V, affine
from tests.support.uploads import AFFINE, upload
from tests.support.v2 import binary_input, binary_request
from validator import validate

X = np.arange(8, dtype=np.float32).reshape(2, 4)


def _json_infer(x: np.ndarray) -> dict[str, object]:
    return {
        "id": "req-7",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.tolist()}],
    }


def test_server_metadata_advertises_binary_tensor_data(client: TestClient) -> None:
    assert client.get("/v2").json()["extensions"] == ["binary_tensor_data"]


def test_model_metadata_and_ready_at_latest_and_pinned_versions(
    client: TestClient, key_a: str
) -> None:
    upload(client, key_a)
    upload(client, key_a)
    settings: Settings = client.app.state.settings  # type: ignore[attr-defined]
    expected = {
        "name": "m",
        "versions": ["2"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}],
        # the affine program is proven batchable: it batches with the server's policy
        "parameters": {
            "dynamic_batching": {
                "max_batch_size": settings.batch_max_size,
                "max_queue_delay_us": settings.batch_max_queue_delay_us,
                "preferred_batch_sizes": list(settings.batch_preferred_sizes),
            }
        },
    }
    response = client.get("/v2/models/m", headers=auth(key_a))
    assert response.status_code == 200 and response.json() == expected
    pinned = client.get("/v2/models/m/versions/1", headers=auth(key_a)).json()
    assert pinned == {**expected, "versions": ["1"]}
    assert client.get("/v2/models/m/ready", headers=auth(key_a)).json() == {
        "name": "m",
        "version": "2",
        "ready": True,
    }
    assert client.get("/v2/models/m/versions/1/ready", headers=auth(key_a)).status_code == 200


def test_json_infer_equals_the_local_run(client: TestClient, key_a: str) -> None:
    upload(client, key_a)
    response = client.post("/v2/models/m/infer", json=_json_infer(X), headers=auth(key_a))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["id"] == "req-7" and body["model_version"] == "1"
    local = compile(validate(AFFINE.program, AFFINE.params), SessionOptions(use_cuda=False))
    want = local.run({"x": X})["y"]
    got = np.array(body["outputs"][0]["data"], np.float32).reshape(2, 4)
    np.testing.assert_array_equal(got, want)


def test_binary_infer_without_content_type(client: TestClient, key_a: str) -> None:
    upload(client, key_a)
    doc = {
        "inputs": [binary_input(X)],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }
    body, headers = binary_request(doc, [X])
    response = client.post(
        "/v2/models/m/versions/1/infer", content=body, headers={**auth(key_a), **headers}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    length = int(response.headers["inference-header-content-length"])
    doc = json.loads(response.content[:length])
    assert doc["outputs"][0]["parameters"] == {"binary_data_size": 32}
    assert len(response.content) == length + 32


def test_a_body_of_megabytes_answers_as_a_small_one_and_over_the_cap_is_413(
    make_settings: SettingsFactory,
) -> None:
    """A body's pieces are joined where it is decoded, a big one in a thread, off the event
    loop (server/services/inference.py `answer`): streamed in pieces without a Content-Length,
    such a body answers what the same rows answer in a small request, and one over the cap is
    still 413."""
    rows = np.random.default_rng(0).standard_normal((131072, 4)).astype(np.float32)  # 2 MiB
    cap = 3 * 1024 * 1024
    with TestClient(create_app(make_settings(max_infer_bytes=cap))) as client:
        key = new_tenant(client, "acme")
        upload(client, key, built=affine().built())

        def infer(x: np.ndarray, pieces: int) -> Any:
            doc = {
                "inputs": [binary_input(x)],
                "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
            }
            body, headers = binary_request(doc, [x])
            step = -(-len(body) // pieces)
            streamed = (body[i : i + step] for i in range(0, len(body), step))
            return client.post(
                "/v2/models/m/infer", content=streamed, headers={**auth(key), **headers}
            )

        def values(answer: Any) -> np.ndarray:
            assert answer.status_code == 200, answer.text
            length = int(answer.headers["inference-header-content-length"])
            return np.frombuffer(answer.content[length:], np.float32).reshape(-1, 4)

        big = values(infer(rows, pieces=32))
        head, tail = values(infer(rows[:3], pieces=1)), values(infer(rows[-3:], pieces=1))
        assert big.shape == rows.shape
        np.testing.assert_array_equal(big[:3], head)
        np.testing.assert_array_equal(big[-3:], tail)
        over = infer(np.concatenate([rows, rows]), pieces=64)  # 4 MiB
        assert_error(over, 413, "PAYLOAD_TOO_LARGE")


def test_bad_requests_are_400_with_their_code(client: TestClient, key_a: str) -> None:
    upload(client, key_a)
    bad = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    response = client.post("/v2/models/m/infer", json=bad, headers=auth(key_a))
    assert_error(response, 400, "INPUT_DTYPE")
    assert response.json()["error"] == "input 'x': expected datatype 'FP32', got 'INT64'"
    response = client.post("/v2/models/m/infer", content=b"{", headers=auth(key_a))
    assert_error(response, 400, "INFER_MALFORMED")
    headers = {**auth(key_a), "Inference-Header-Content-Length": "x"}
    response = client.post("/v2/models/m/infer", content=b"{}", headers=headers)
    assert_error(response, 400, "INFER_HEADER_LENGTH")


def _two_inputs() -> Built:
    """y = x + z over x, z FP32[-1, 4]: the batch dims must agree, which only the run can see."""
    g = GraphBuilder()
    g.feed("x", DType.FP32, [-1, 4])
    g.feed("z", DType.FP32, [-1, 4])
    g.node("elementwise_add", {"X": ["x"], "Y": ["z"]}, {"Out": [V("y", [-1, 4])]})
    g.fetch("y")
    return g.built()


def test_executor_errors_keep_their_codes(client: TestClient, key_a: str) -> None:
    upload(client, key_a, "add", _two_inputs())
    inputs = [
        {"name": "x", "datatype": "FP32", "shape": [2, 4], "data": [0] * 8},
        {"name": "z", "datatype": "FP32", "shape": [3, 4], "data": [0] * 12},
    ]
    response = client.post("/v2/models/add/infer", json={"inputs": inputs}, headers=auth(key_a))
    assert_error(response, 400, "INPUT_INCOMPATIBLE")


def test_other_tenants_and_unknown_models_are_404(
    client: TestClient, key_a: str, key_b: str
) -> None:
    upload(client, key_a)
    for path in ("/v2/models/m", "/v2/models/m/ready", "/v2/models/nope/ready"):
        assert_error(client.get(path, headers=auth(key_b)), 404, "NOT_FOUND")
    response = client.post("/v2/models/m/infer", json=_json_infer(X), headers=auth(key_b))
    assert_error(response, 404, "NOT_FOUND")
    assert_error(client.get("/v2/models/m/versions/9", headers=auth(key_a)), 404, "NOT_FOUND")


def test_missing_keys_are_401(client: TestClient, key_a: str) -> None:
    upload(client, key_a)
    assert_error(client.get("/v2/models/m"), 401, "UNAUTHORIZED")
    assert_error(client.post("/v2/models/m/infer", json=_json_infer(X)), 401, "UNAUTHORIZED")


def test_bodies_over_the_cap_are_413(make_settings: SettingsFactory) -> None:
    with TestClient(create_app(make_settings(max_infer_bytes=200))) as client:
        key = new_tenant(client, "acme")
        upload(client, key, built=affine().built())
        small = client.post("/v2/models/m/infer", json=_json_infer(X[:1]), headers=auth(key))
        assert small.status_code == 200, small.text
        big = client.post(
            "/v2/models/m/infer", json=_json_infer(np.zeros((50, 4), np.float32)), headers=auth(key)
        )
        assert_error(big, 413, "PAYLOAD_TOO_LARGE")
        assert big.json()["error"] == "request body exceeds the 200-byte limit"

        def chunks():  # no Content-Length: counted as it streams
            yield b"{" + b" " * 150
            yield b" " * 150 + b"}"

        streamed = client.post("/v2/models/m/infer", content=chunks(), headers=auth(key))
        assert_error(streamed, 413, "PAYLOAD_TOO_LARGE")

        # The cap is checked when the body is read: the key and the model answer first.
        too_big = {"content-length": "100000"}
        unauthenticated = client.post("/v2/models/m/infer", content=b"{}", headers=too_big)
        assert_error(unauthenticated, 401, "UNAUTHORIZED")
        unknown = client.post(
            "/v2/models/nope/infer", content=b"{}", headers={**too_big, **auth(key)}
        )
        assert_error(unknown, 404, "NOT_FOUND")
        pinned = client.post(
            "/v2/models/m/versions/1/infer/", content=b"{" + b" " * 300 + b"}", headers=auth(key)
        )
        assert_error(pinned, 413, "PAYLOAD_TOO_LARGE")
