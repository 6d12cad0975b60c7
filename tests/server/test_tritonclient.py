"""The official tritonclient.http against a real `graphgate serve` process on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from executor import CompiledModel, SessionOptions, compile
from graph_proto.types import DType
from server.settings import Settings
from tests.support.api import auth, post_tenant
from tests.support.backends import backend_environment
from tests.support.builders import Built, GraphBuilder, V, weights
from tests.support.served import Server
from tests.support.uploads import post_model
from validator import validate

DEFAULTS = Settings()  # what `graphgate serve` runs with here (no GRAPHGATE_BATCH_* set)


def _two_outputs() -> Built:
    """y = x * scale over x FP32[-1, 3]; ids_out = assign(ids) over ids INT64[-1]."""
    g = GraphBuilder()
    g.feed("x", DType.FP32, [-1, 3])
    g.feed("ids", DType.INT64, [-1])
    scale = g.param("scale", weights(3))
    g.node("elementwise_mul", {"X": ["x"], "Y": [scale]}, {"Out": [V("y", [-1, 3])]})
    g.node("assign", {"X": ["ids"]}, {"Out": [V("ids_out", [-1], DType.INT64)]})
    g.fetch("y")
    g.fetch("ids_out")
    return g.built()


MODEL = _two_outputs()
X = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
IDS = np.array([3, -1, 2**40], np.int64)


@pytest.fixture(scope="module")
def local() -> CompiledModel:
    return compile(validate(MODEL.program, MODEL.params), SessionOptions(use_cuda=False))


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, backend: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Server, str]]:
    """A server with tenant `acme` owning model `m`; yields the server and acme's key."""
    env = backend_environment(backend, request)
    with Server(Path(tmp_path_factory.mktemp("triton")) / "data", env) as server:
        key = post_tenant(server, "acme")
        uploaded = post_model(server, key, built=MODEL)
        assert uploaded.status_code == 201, uploaded.text
        yield server, key


@pytest.fixture
def client(served: tuple[Server, str]) -> Iterator[triton.InferenceServerClient]:
    c = triton.InferenceServerClient(url=f"127.0.0.1:{served[0].port}")
    yield c
    c.close()


def _inputs() -> list[triton.InferInput]:
    x = triton.InferInput("x", list(X.shape), "FP32")
    x.set_data_from_numpy(X)  # binary_data=True is the client's default
    ids = triton.InferInput("ids", list(IDS.shape), "INT64")
    ids.set_data_from_numpy(IDS)
    return [x, ids]


def test_health_and_model_readiness(
    client: triton.InferenceServerClient, served: tuple[Server, str]
) -> None:
    headers = auth(served[1])
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("m", headers=headers)
    assert client.is_model_ready("m", "1", headers=headers)
    assert not client.is_model_ready("other", headers=headers)
    assert not client.is_model_ready("m")  # no key
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]


def test_model_metadata(client: triton.InferenceServerClient, served: tuple[Server, str]) -> None:
    assert client.get_model_metadata("m", headers=auth(served[1])) == {
        "name": "m",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [-1, 3]},
            {"name": "ids", "datatype": "INT64", "shape": [-1]},
        ],
        "outputs": [
            {"name": "y", "datatype": "FP32", "shape": [-1, 3]},
            {"name": "ids_out", "datatype": "INT64", "shape": [-1]},
        ],
        # proven batchable: it batches with the server's default policy
        "parameters": {
            "dynamic_batching": {
                "max_batch_size": DEFAULTS.batch_max_size,
                "max_queue_delay_us": DEFAULTS.batch_max_queue_delay_us,
                "preferred_batch_sizes": list(DEFAULTS.batch_preferred_sizes),
            }
        },
    }


def test_infer_binary_inputs_binary_and_json_outputs(
    client: triton.InferenceServerClient, served: tuple[Server, str], local: CompiledModel
) -> None:
    outputs = [
        triton.InferRequestedOutput("y", binary_data=True),
        triton.InferRequestedOutput("ids_out", binary_data=False),
    ]
    result = client.infer(
        "m", _inputs(), outputs=outputs, request_id="r-1", headers=auth(served[1])
    )
    want = local.run({"x": X, "ids": IDS})
    response = result.get_response()
    assert response["id"] == "r-1" and response["model_version"] == "1"
    assert response["outputs"][0]["parameters"] == {"binary_data_size": X.nbytes}
    assert "data" in response["outputs"][1]  # JSON, as asked
    y, ids = result.as_numpy("y"), result.as_numpy("ids_out")
    assert y is not None and ids is not None
    assert y.dtype == np.float32 and y.tobytes() == want["y"].tobytes()
    np.testing.assert_array_equal(ids, want["ids_out"])


def test_infer_default_outputs_and_compressed_request(
    client: triton.InferenceServerClient, served: tuple[Server, str], local: CompiledModel
) -> None:
    result = client.infer(
        "m",
        _inputs(),
        model_version="1",
        headers=auth(served[1]),
        request_compression_algorithm="gzip",
    )
    want = local.run({"x": X, "ids": IDS})
    for name in ("y", "ids_out"):
        got = result.as_numpy(name)
        assert got is not None and got.tobytes() == want[name].tobytes()


def test_infer_errors_reach_the_client(
    client: triton.InferenceServerClient, served: tuple[Server, str]
) -> None:
    x = triton.InferInput("x", [4, 2], "FP32")
    x.set_data_from_numpy(np.zeros((4, 2), np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("m", [x, _inputs()[1]], headers=auth(served[1]))
    assert info.value.message() == "input 'x': expected shape [-1, 3], got [4, 2]"
    assert info.value.status() == "400"


def test_requests_whose_feeds_disagree_on_rows_are_never_batched_with_others(
    served: tuple[Server, str], local: CompiledModel
) -> None:
    """A request whose feeds have different leading dims (x of 1-3 rows, ids of 2) is not a
    batch of rows: merged into a batch, its answers were split by x's rows and came back with
    other requests' ids. 64 such requests at once, each with ids of its own: every answer is
    its own request's."""
    server, key = served

    def one(i: int) -> tuple[int, dict[str, np.ndarray]]:
        rows = 1 + i % 3
        x = np.full((rows, 3), float(i), np.float32)
        ids = np.array([i, -i - 1], np.int64)
        inputs = [triton.InferInput("x", [rows, 3], "FP32"), triton.InferInput("ids", [2], "INT64")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(ids)
        c = triton.InferenceServerClient(url=f"127.0.0.1:{server.port}")
        try:
            result = c.infer("m", inputs, headers=auth(key))
        finally:
            c.close()
        got = {name: result.as_numpy(name) for name in ("y", "ids_out")}
        return i, {"x": x, "ids": ids, **got}

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(64)))
    for i, answer in answers:
        want = local.run({"x": answer["x"], "ids": answer["ids"]})
        np.testing.assert_array_equal(answer["ids_out"], want["ids_out"], err_msg=f"request {i}")
        np.testing.assert_allclose(answer["y"], want["y"], rtol=1e-6, err_msg=f"request {i}")
