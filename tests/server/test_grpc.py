"""KServe V2 over gRPC against a real `graphgate serve`: the official tritonclient.grpc, unchanged,
and raw calls with the protocol's own messages for what that client never sends (typed
contents, hostile messages). Every error is a status with graphgate's code in the trailing
metadata, and the server keeps serving everyone else."""

from __future__ import annotations

import asyncio
import functools
import queue
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import grpc
import httpx2
import numpy as np
import pytest
import tritonclient.grpc as triton
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException
from typer.testing import CliRunner

from executor import CompiledModel, SessionOptions, compile
from graph_proto.types import DType
from server.cli.main import app as cli
from server.grpc import grpc_predict_v2_pb2 as pb
from server.grpc import health_pb2
from tests.support.api import ADMIN_TOKEN, auth, post_tenant
from tests.support.builders import Built, GraphBuilder, V, affine, matmul_chain, weights
from tests.support.realservers import free_port as _free_port
from tests.support.served import Server
from validator import validate

METHOD: Final = "/inference.GRPCInferenceService/"
CODE: Final = "graphgate-code"
INFER_CAP: Final = 1024 * 1024  # GRAPHGATE_MAX_INFER_BYTES of the main server
X = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
IDS = np.array([3, -1, 2**40], np.int64)


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
TINY = affine().built()
# Minutes of 2048x2048 matmuls on one CPU core (0.1-0.6 s a link on the machines this ran on):
# a run that only a cancellation or a deadline ends within a test.
SLOW = matmul_chain(1000).built()
SLOW_N: Final = 2048


# -- servers -----------------------------------------------------------------------------------


class GrpcServer(Server):
    """`graphgate serve` with its gRPC endpoint on a free port of its own."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.grpc_port = _free_port()
        super().__init__(data_dir, {**(env or {}), "GRAPHGATE_GRPC_PORT": str(self.grpc_port)})
        self.address = f"127.0.0.1:{self.grpc_port}"


def upload(server: Server, key: str, name: str, built: Built) -> None:
    files = {"program": built.program, "params": built.params or b""}
    sent = httpx2.post(
        f"{server.url}/v1/models", data={"name": name}, files=files, headers=auth(key), timeout=120
    )
    assert sent.status_code == 201, sent.text


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GrpcServer, str, str]]:
    """Tenant acme owns `m`; tenant globex owns `m` and `secret`. Yields both keys."""
    env = {
        "GRAPHGATE_MAX_INFER_BYTES": str(INFER_CAP),
        "GRAPHGATE_USE_CUDA": "false",
        # a batch budget no run reaches: a loaded machine's slow runs never cap the 64 concurrent
        # calls' batches at one row (the cap itself: tests/server/test_batching.py)
        "GRAPHGATE_BATCH_MAX_RUN_MS": "60000",
    }
    server = GrpcServer(Path(tmp_path_factory.mktemp("grpc")) / "data", env)
    server.start()
    try:
        acme, globex = post_tenant(server, "acme"), post_tenant(server, "globex")
        upload(server, acme, "m", MODEL)
        upload(server, globex, "m", TINY)
        upload(server, globex, "secret", TINY)
        yield server, acme, globex
    finally:
        server.stop()


@pytest.fixture(scope="module")
def lonely(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GrpcServer, str]]:
    """One worker, on the CPU, with a long server deadline: only the client ends a slow run."""
    env = {
        "GRAPHGATE_WORKERS": "1",
        "GRAPHGATE_USE_CUDA": "false",
        "GRAPHGATE_INFER_TIMEOUT_S": "3600",
        # one call of the tenant at a time: a second one refused TOO_MANY_CONCURRENT tells the
        # test the first is in the server's hands
        "GRAPHGATE_TENANT_MAX_CONCURRENT": "1",
        "GRAPHGATE_MAX_INFER_BYTES": str(32 * 1024 * 1024),
    }
    server = GrpcServer(Path(tmp_path_factory.mktemp("grpc-lonely")) / "data", env)
    server.start()
    try:
        key = post_tenant(server, "acme")
        upload(server, key, "slow", SLOW)
        upload(server, key, "tiny", TINY)
        yield server, key
    finally:
        server.stop()


@pytest.fixture(scope="module")
def local() -> CompiledModel:
    return compile(validate(MODEL.program, MODEL.params), SessionOptions(use_cuda=False))


@pytest.fixture
def client(served: tuple[GrpcServer, str, str]) -> Iterator[triton.InferenceServerClient]:
    c = triton.InferenceServerClient(served[0].address)
    yield c
    c.close()


# -- raw calls ---------------------------------------------------------------------------------


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def call(
    address: str,
    method: str,
    payload: bytes,
    metadata: Sequence[tuple[str, str]] = (),
    timeout: float = 60,
) -> bytes:
    """One unary call with a raw payload, as any client could send it."""
    options = [("grpc.max_send_message_length", -1), ("grpc.max_metadata_size", 2**24)]
    with grpc.insecure_channel(address, options=options) as channel:
        answer: bytes = channel.unary_unary(METHOD + method)(
            payload, metadata=tuple(metadata), timeout=timeout
        )
        return answer


def infer(address: str, request: pb.ModelInferRequest, key: str) -> pb.ModelInferResponse:
    raw = call(address, "ModelInfer", request.SerializeToString(), bearer(key))
    return pb.ModelInferResponse.FromString(raw)


def refused(
    address: str, method: str, payload: bytes, metadata: Sequence[tuple[str, str]] = ()
) -> tuple[grpc.StatusCode, str | None, str]:
    """The status, graphgate's code and the message of a call that must fail."""
    with pytest.raises(grpc.RpcError) as info:
        call(address, method, payload, metadata)
    error: Any = info.value
    trailers = dict(error.trailing_metadata() or ())
    return error.code(), trailers.get(CODE), error.details()


def request_of(*tensors: tuple[str, str, Sequence[int]], raw: Sequence[bytes]) -> bytes:
    message = pb.ModelInferRequest(model_name="m", raw_input_contents=raw)
    for name, datatype, shape in tensors:
        message.inputs.add(name=name, datatype=datatype, shape=shape)
    return message.SerializeToString()


def triton_inputs(x: np.ndarray = X, ids: np.ndarray = IDS) -> list[triton.InferInput]:
    tx = triton.InferInput("x", list(x.shape), "FP32")
    tx.set_data_from_numpy(x)
    tids = triton.InferInput("ids", list(ids.shape), "INT64")
    tids.set_data_from_numpy(ids)
    return [tx, tids]


def metrics(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx2.get(f"{server.url}/metrics", headers=auth(ADMIN_TOKEN), timeout=60).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def assert_serving(server: GrpcServer, key: str, local: CompiledModel) -> None:
    """Another call right after: answered, and right."""
    c = triton.InferenceServerClient(server.address)
    try:
        result = c.infer("m", triton_inputs(), headers={"authorization": f"Bearer {key}"})
        y = result.as_numpy("y")
        assert y is not None
        np.testing.assert_allclose(y, local.run({"x": X, "ids": IDS})["y"], rtol=1e-6)
    finally:
        c.close()


# -- tritonclient.grpc, unchanged ------------------------------------------------------------


def test_health_metadata_and_readiness(
    client: triton.InferenceServerClient, served: tuple[GrpcServer, str, str]
) -> None:
    server, acme, _ = served
    headers = {"authorization": f"Bearer {acme}"}
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "graphgate" and "binary_tensor_data" in meta["extensions"]
    assert client.is_model_ready("m", headers=headers)
    assert client.is_model_ready("m", "1", headers=headers)
    assert not client.is_model_ready("secret", headers=headers)  # globex's: not acme's
    with pytest.raises(InferenceServerException) as info:
        client.is_model_ready("m")  # no key
    assert info.value.status() == "StatusCode.UNAUTHENTICATED"
    check = health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService")
    with grpc.insecure_channel(server.address) as channel:
        probe = channel.unary_unary("/grpc.health.v1.Health/Check")
        for service in ("", check.service):
            raw = probe(health_pb2.HealthCheckRequest(service=service).SerializeToString())
            status = health_pb2.HealthCheckResponse.FromString(raw).status
            assert status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as unknown:
            probe(health_pb2.HealthCheckRequest(service="nope").SerializeToString())
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_model_metadata(
    client: triton.InferenceServerClient, served: tuple[GrpcServer, str, str]
) -> None:
    meta = client.get_model_metadata("m", headers={"authorization": f"Bearer {served[1]}"})
    assert (meta.name, list(meta.versions), meta.platform) == ("m", ["1"], "onnxruntime_onnx")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("x", "FP32", [-1, 3]),
        ("ids", "INT64", [-1]),
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
        ("y", "FP32", [-1, 3]),
        ("ids_out", "INT64", [-1]),
    ]


def test_infer_raw_contents(
    client: triton.InferenceServerClient,
    served: tuple[GrpcServer, str, str],
    local: CompiledModel,
) -> None:
    headers = {"authorization": f"Bearer {served[1]}"}
    result = client.infer("m", triton_inputs(), request_id="r-1", headers=headers)
    want = local.run({"x": X, "ids": IDS})
    response = result.get_response()
    assert (response.id, response.model_name, response.model_version) == ("r-1", "m", "1")
    y, ids = result.as_numpy("y"), result.as_numpy("ids_out")
    assert y is not None and ids is not None
    assert y.dtype == np.float32 and y.shape == (4, 3)
    np.testing.assert_allclose(y, want["y"], rtol=1e-6, atol=0)
    np.testing.assert_array_equal(ids, IDS)
    # the outputs asked for, only those
    only = client.infer(
        "m", triton_inputs(), outputs=[triton.InferRequestedOutput("ids_out")], headers=headers
    )
    assert [o.name for o in only.get_response().outputs] == ["ids_out"]
    np.testing.assert_array_equal(only.as_numpy("ids_out"), IDS)


def test_infer_typed_contents_in_and_out(
    served: tuple[GrpcServer, str, str], local: CompiledModel
) -> None:
    server, acme, _ = served
    request = pb.ModelInferRequest(model_name="m", id="typed")
    x = request.inputs.add(name="x", datatype="FP32", shape=list(X.shape))
    x.contents.fp32_contents.extend(X.ravel().tolist())
    ids = request.inputs.add(name="ids", datatype="INT64", shape=list(IDS.shape))
    ids.contents.int64_contents.extend(IDS.tolist())
    request.parameters["binary_data_output"].bool_param = False  # typed contents back
    answer = infer(server.address, request, acme)
    want = local.run({"x": X, "ids": IDS})
    assert answer.id == "typed" and not answer.raw_output_contents
    y, ids_out = answer.outputs
    assert (y.name, y.datatype, list(y.shape)) == ("y", "FP32", [4, 3])
    got = np.array(y.contents.fp32_contents, np.float32).reshape(4, 3)
    np.testing.assert_allclose(got, want["y"], rtol=1e-6, atol=0)
    assert list(ids_out.contents.int64_contents) == IDS.tolist()
    # raw contents in, raw out, as Triton answers by default
    raw = pb.ModelInferRequest(model_name="m", raw_input_contents=[X.tobytes(), IDS.tobytes()])
    raw.inputs.add(name="x", datatype="FP32", shape=[4, 3])
    raw.inputs.add(name="ids", datatype="INT64", shape=[3])
    raw.outputs.add(name="y")
    answer = infer(server.address, raw, acme)
    assert [o.name for o in answer.outputs] == ["y"] and len(answer.raw_output_contents) == 1
    got = np.frombuffer(answer.raw_output_contents[0], np.float32).reshape(4, 3)
    np.testing.assert_allclose(got, want["y"], rtol=1e-6, atol=0)


def test_batching_model_under_64_concurrent_calls(
    client: triton.InferenceServerClient,
    served: tuple[GrpcServer, str, str],
    local: CompiledModel,
) -> None:
    server, acme, _ = served
    headers = {"authorization": f"Bearer {acme}"}
    rng = np.random.default_rng(64)
    # 1 to 3 rows a call, every input with as many rows: the batch axis the batcher merges on
    rows = [1 + i % 3 for i in range(64)]
    feeds = [
        (rng.standard_normal((n, 3)).astype(np.float32), rng.integers(-(2**40), 2**40, n))
        for n in rows
    ]
    before = _batches(server)
    answers: queue.Queue[tuple[int, Any, Any]] = queue.Queue()
    for i, (x, ids) in enumerate(feeds):
        client.async_infer(
            "m",
            triton_inputs(x, ids),
            callback=functools.partial(lambda i, result, error: answers.put((i, result, error)), i),
            headers=headers,
        )
    done = [answers.get(timeout=120) for _ in feeds]
    for i, result, error in done:
        assert error is None, error
        x, ids = feeds[i]
        want = local.run({"x": x, "ids": ids})
        np.testing.assert_allclose(result.as_numpy("y"), want["y"], rtol=1e-6, atol=0)
        np.testing.assert_array_equal(result.as_numpy("ids_out"), ids)
    batches, batched_rows = (a - b for a, b in zip(_batches(server), before, strict=True))
    assert batched_rows == sum(rows)
    assert batches < len(feeds), "64 concurrent calls were expected to share batches"


def _batches(server: Server) -> tuple[float, float]:
    """Worker runs of acme's `m` and the rows they held, from graphgate_batch_size."""
    labels = (("model", "m"), ("tenant", "acme"), ("version", "1"))
    got = metrics(server)
    return got.get(("graphgate_batch_size_count", labels), 0.0), got.get(
        ("graphgate_batch_size_sum", labels), 0.0
    )


def test_another_tenants_model_is_not_found(
    client: triton.InferenceServerClient, served: tuple[GrpcServer, str, str]
) -> None:
    server, acme, globex = served
    with pytest.raises(InferenceServerException) as info:
        client.infer("secret", triton_inputs(), headers={"authorization": f"Bearer {acme}"})
    assert info.value.status() == "StatusCode.NOT_FOUND"
    x = TINY_X.tobytes()
    status, code, _ = refused(
        server.address, "ModelInfer", _tiny_request("secret", x), bearer(acme)
    )
    assert (status, code) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
    # the same request with its owner's key runs
    answer = infer(
        server.address, pb.ModelInferRequest.FromString(_tiny_request("secret", x)), globex
    )
    assert answer.outputs[0].name == "y"


TINY_X = np.ones((2, 4), np.float32)


def _tiny_request(name: str, raw: bytes, shape: Sequence[int] = (2, 4)) -> bytes:
    message = pb.ModelInferRequest(model_name=name, raw_input_contents=[raw])
    message.inputs.add(name="x", datatype="FP32", shape=list(shape))
    return message.SerializeToString()


def test_a_revoked_key_is_unauthenticated(
    client: triton.InferenceServerClient, served: tuple[GrpcServer, str, str]
) -> None:
    server = served[0]
    created = httpx2.post(
        f"{server.url}/v1/admin/tenants/acme/keys", headers=auth(ADMIN_TOKEN), timeout=30
    )
    assert created.status_code == 201, created.text
    key, key_id = created.json()["key"], created.json()["key_id"]
    headers = {"authorization": f"Bearer {key}"}
    assert client.infer("m", triton_inputs(), headers=headers).as_numpy("y") is not None
    revoke = ["tenants", "revoke-key", key_id, "--url", server.url, "--admin-token", ADMIN_TOKEN]
    assert CliRunner().invoke(cli, revoke).exit_code == 0
    with pytest.raises(InferenceServerException) as info:
        client.infer("m", triton_inputs(), headers=headers)
    assert info.value.status() == "StatusCode.UNAUTHENTICATED"
    status, code, _ = refused(
        server.address, "ModelInfer", _tiny_request("m", TINY_X.tobytes()), bearer(key)
    )
    assert (status, code) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHORIZED")


def test_rate_limit_is_resource_exhausted_with_a_retry_hint(
    served: tuple[GrpcServer, str, str],
) -> None:
    server = served[0]
    key = post_tenant(server, "hasty")
    quota = httpx2.put(
        f"{server.url}/v1/admin/tenants/hasty/quota",
        json={"rate_per_s": 0.001, "burst": 1},
        headers=auth(ADMIN_TOKEN),
        timeout=30,
    )
    assert quota.status_code == 200, quota.text
    payload = _tiny_request("nothing-here", TINY_X.tobytes())
    first = refused(server.address, "ModelInfer", payload, bearer(key))
    assert first[:2] == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")  # took the only token
    with pytest.raises(grpc.RpcError) as info:
        call(server.address, "ModelInfer", payload, bearer(key))
    error: Any = info.value
    trailers = dict(error.trailing_metadata())
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert trailers[CODE] == "RATE_LIMITED" and int(trailers["retry-after"]) >= 1


# -- deadlines and cancellation ---------------------------------------------------------------


def _slow_inputs() -> list[triton.InferInput]:
    x = triton.InferInput("x", [SLOW_N, SLOW_N], "FP32")
    x.set_data_from_numpy(np.eye(SLOW_N, dtype=np.float32))
    return [x]


def test_deadlines_end_a_slow_run(lonely: tuple[GrpcServer, str]) -> None:
    server, key = lonely
    headers = {"authorization": f"Bearer {key}"}
    c = triton.InferenceServerClient(server.address)
    try:
        with pytest.raises(InferenceServerException) as info:  # the gRPC deadline
            c.infer("slow", _slow_inputs(), headers=headers, client_timeout=1.0)
        assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        with pytest.raises(InferenceServerException) as info:  # V2 `timeout`, microseconds
            c.infer("slow", _slow_inputs(), headers=headers, timeout=500_000)
        assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    finally:
        c.close()
    request = pb.ModelInferRequest(
        model_name="slow", raw_input_contents=[np.eye(SLOW_N, dtype=np.float32).tobytes()]
    )
    request.inputs.add(name="x", datatype="FP32", shape=[SLOW_N, SLOW_N])
    request.parameters["timeout"].int64_param = 500_000
    status, code, _ = refused(
        server.address, "ModelInfer", request.SerializeToString(), bearer(key)
    )
    assert (status, code) == (grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED")
    _assert_worker_free(server, key)


def test_a_cancelled_call_frees_its_worker(lonely: tuple[GrpcServer, str]) -> None:
    server, key = lonely
    c = triton.InferenceServerClient(server.address)
    try:
        before = _cancelled(server)
        pending, ended = _start_slow(server, key, c)
        pending.cancel()
        error = ended.get(timeout=60)
        assert isinstance(error, InferenceServerException)
        assert error.status() == "StatusCode.CANCELLED"
    finally:
        c.close()
    _assert_worker_free(server, key)
    assert _cancelled(server) == before + 1


def test_the_tenants_slot_comes_back_after_every_outcome(lonely: tuple[GrpcServer, str]) -> None:
    """The tenant may run one call at a time: a call that fails after taking the slot (a
    missing model, raw contents of the wrong size, a deadline) gives it back, or the tiny
    call after it would be refused TOO_MANY_CONCURRENT."""
    server, key = lonely
    short = _tiny_request("tiny", TINY_X.tobytes()[:-4])
    slow = pb.ModelInferRequest(
        model_name="slow", raw_input_contents=[np.eye(SLOW_N, dtype=np.float32).tobytes()]
    )
    slow.inputs.add(name="x", datatype="FP32", shape=[SLOW_N, SLOW_N])
    slow.parameters["timeout"].int64_param = 200_000
    failures = [
        (_tiny_request("nothing-here", TINY_X.tobytes()), grpc.StatusCode.NOT_FOUND),
        (short, grpc.StatusCode.INVALID_ARGUMENT),
        (slow.SerializeToString(), grpc.StatusCode.DEADLINE_EXCEEDED),
    ]
    for payload, expected in failures:
        assert refused(server.address, "ModelInfer", payload, bearer(key))[0] == expected
        _assert_worker_free(server, key)


def _start_slow(
    server: GrpcServer, key: str, c: triton.InferenceServerClient, timeout_us: int | None = None
) -> tuple[Any, queue.Queue[Any]]:
    """The slow call, once it holds the tenant's only slot (a tiny call is then refused
    TOO_MANY_CONCURRENT), and a moment more for its run to start on the worker. A probe may
    take the slot first (the slow call is then refused): it is sent again."""
    headers = {"authorization": f"Bearer {key}"}
    probe = _tiny_request("tiny", TINY_X.tobytes())
    for _attempt in range(10):
        ended: queue.Queue[Any] = queue.Queue()
        pending = c.async_infer(
            "slow",
            _slow_inputs(),
            callback=functools.partial(_errors_to, ended),
            headers=headers,
            timeout=timeout_us,
        )
        while ended.empty():
            try:
                call(server.address, "ModelInfer", probe, bearer(key))
            except grpc.RpcError as e:
                assert dict(e.trailing_metadata() or ()).get(CODE) == "TOO_MANY_CONCURRENT"
                threading.Event().wait(1.0)  # decoded and sent to the worker meanwhile
                return pending, ended
            threading.Event().wait(0.05)
        lost = ended.get()
        assert isinstance(lost, InferenceServerException) and "concurrent" in lost.message()
    raise AssertionError("the slow call never held the tenant's slot")


def _errors_to(box: queue.Queue[Any], result: Any, error: Any) -> None:
    box.put(error)


def test_sigterm_drains_an_in_flight_call_and_refuses_new_ones(tmp_path: Path) -> None:
    env = {
        "GRAPHGATE_WORKERS": "1",
        "GRAPHGATE_USE_CUDA": "false",
        "GRAPHGATE_INFER_TIMEOUT_S": "3600",
        "GRAPHGATE_TENANT_MAX_CONCURRENT": "1",
        "GRAPHGATE_MAX_INFER_BYTES": str(32 * 1024 * 1024),
        "GRAPHGATE_SHUTDOWN_GRACE_S": "30",
    }
    server = GrpcServer(tmp_path / "data", env)
    server.start()
    try:
        key = post_tenant(server, "acme")
        upload(server, key, "slow", SLOW)
        upload(server, key, "tiny", TINY)
        with grpc.insecure_channel(server.address) as channel:
            watch = channel.unary_stream("/grpc.health.v1.Health/Watch")(
                health_pb2.HealthCheckRequest().SerializeToString()
            )
            states = (health_pb2.HealthCheckResponse.FromString(raw).status for raw in watch)
            assert next(states) == health_pb2.HealthCheckResponse.SERVING
            c = triton.InferenceServerClient(server.address)
            # running when SIGTERM comes; the server ends it at its V2 timeout (5 s)
            _pending, ended = _start_slow(server, key, c, timeout_us=5_000_000)
            assert server.process is not None
            server.process.send_signal(signal.SIGTERM)
            assert next(states) == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(InferenceServerException) as refused:  # a new call
                c.infer("tiny", [_tiny_input()], headers={"authorization": f"Bearer {key}"})
            # Refused, never served: UNAVAILABLE once the server stops taking calls; under load
            # the call may reach it as its graceful stop begins (CANCELLED), or while the
            # in-flight call still holds the tenant's slot (RESOURCE_EXHAUSTED).
            refusals = ("UNAVAILABLE", "CANCELLED", "RESOURCE_EXHAUSTED")
            assert refused.value.status() in {f"StatusCode.{name}" for name in refusals}
            error = ended.get(timeout=60)  # answered by the server, not cut by the stop
            assert isinstance(error, InferenceServerException)
            assert error.status() == "StatusCode.DEADLINE_EXCEEDED"
            c.close()
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop(signal.SIGKILL)


def _tiny_input() -> triton.InferInput:
    x = triton.InferInput("x", [2, 4], "FP32")
    x.set_data_from_numpy(TINY_X)
    return x


def _assert_worker_free(server: GrpcServer, key: str) -> None:
    """The only worker answers a tiny call: the slow run (minutes) was stopped. The wait is a
    bound for a hung server, not a measure."""
    request = pb.ModelInferRequest.FromString(_tiny_request("tiny", TINY_X.tobytes()))
    raw = call(server.address, "ModelInfer", request.SerializeToString(), bearer(key), timeout=60)
    assert pb.ModelInferResponse.FromString(raw).outputs[0].shape == [2, 4]


def _cancelled(server: GrpcServer) -> float:
    labels = (("model", "slow"), ("protocol", "grpc"), ("status", "CANCELLED"), ("tenant", "acme"))
    return metrics(server).get(("graphgate_inference_requests_total", labels), 0.0)


# -- hostile messages ---------------------------------------------------------------------------


def test_raw_contents_that_disagree_with_shape_or_datatype(
    served: tuple[GrpcServer, str, str], local: CompiledModel
) -> None:
    server, acme, _ = served
    cases = {
        "short raw": request_of(
            ("x", "FP32", [4, 3]), ("ids", "INT64", [3]), raw=[X.tobytes()[:-4], IDS.tobytes()]
        ),
        "a raw entry missing": request_of(
            ("x", "FP32", [4, 3]), ("ids", "INT64", [3]), raw=[X.tobytes()]
        ),
        "2 GiB declared": request_of(
            ("x", "FP32", [2**29, 1]), ("ids", "INT64", [3]), raw=[X.tobytes(), IDS.tobytes()]
        ),
    }
    codes = {
        name: refused(server.address, "ModelInfer", payload, bearer(acme))[:2]
        for name, payload in cases.items()
    }
    assert codes == {
        "short raw": (grpc.StatusCode.INVALID_ARGUMENT, "INFER_BINARY_SIZE"),
        "a raw entry missing": (grpc.StatusCode.INVALID_ARGUMENT, "INFER_DATA_SOURCE"),
        "2 GiB declared": (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_SHAPE"),
    }
    # the 2 GiB shape on a dim the signature leaves free: refused before any allocation
    huge = request_of(
        ("x", "FP32", [178956971, 3]), ("ids", "INT64", [3]), raw=[X.tobytes(), IDS.tobytes()]
    )
    status, code, message = refused(server.address, "ModelInfer", huge, bearer(acme))
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INFER_BINARY_SIZE")
    assert "expected binary_data_size 2147483652" in message
    typed = pb.ModelInferRequest(model_name="m")
    x = typed.inputs.add(name="x", datatype="FP32", shape=[178956971, 3])
    x.contents.fp32_contents.extend([1.0] * 12)
    typed.inputs.add(name="ids", datatype="INT64", shape=[3]).contents.int64_contents.extend(
        [1, 2, 3]
    )
    status, code, _ = refused(server.address, "ModelInfer", typed.SerializeToString(), bearer(acme))
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INFER_ELEMENT_COUNT")
    assert_serving(server, acme, local)


def test_wrong_datatypes(served: tuple[GrpcServer, str, str], local: CompiledModel) -> None:
    server, acme, _ = served
    as_int32 = request_of(
        ("x", "INT32", [4, 3]), ("ids", "INT64", [3]), raw=[X.tobytes(), IDS.tobytes()]
    )
    as_bytes = request_of(
        ("x", "BYTES", [4, 3]), ("ids", "INT64", [3]), raw=[X.tobytes(), IDS.tobytes()]
    )
    wrong_field = pb.ModelInferRequest(model_name="m")
    x = wrong_field.inputs.add(name="x", datatype="FP32", shape=[4, 3])
    x.contents.int64_contents.extend(range(12))
    ids = wrong_field.inputs.add(name="ids", datatype="INT64", shape=[3])
    ids.contents.int64_contents.extend([1, 2, 3])
    got = [
        refused(server.address, "ModelInfer", payload, bearer(acme))[:2]
        for payload in (as_int32, as_bytes, wrong_field.SerializeToString())
    ]
    assert got == [
        (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_DTYPE"),
        (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_DTYPE"),
        (grpc.StatusCode.INVALID_ARGUMENT, "INFER_DATA_SOURCE"),
    ]
    garbage = refused(server.address, "ModelInfer", b"\xff\xff\xff\xff", bearer(acme))
    assert garbage[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "INFER_MALFORMED")
    assert_serving(server, acme, local)


def test_ten_thousand_metadata_entries(
    served: tuple[GrpcServer, str, str], local: CompiledModel
) -> None:
    server, acme, _ = served
    entries = [*bearer(acme), *((f"x-{i}", "1") for i in range(10_000))]
    payload = _tiny_request("m", TINY_X.tobytes())
    status, code, message = refused(server.address, "ModelInfer", payload, entries)
    assert (status, code) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_HEADERS")
    assert "expected at most 100 metadata entries" in message
    big = [*bearer(acme), ("x-big", "v" * 70_000)]
    status, code, _ = refused(server.address, "ModelInfer", payload, big)
    assert (status, code) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "HEADER_TOO_LARGE")
    assert_serving(server, acme, local)


def test_an_oversized_message(served: tuple[GrpcServer, str, str], local: CompiledModel) -> None:
    server, acme, _ = served
    rows = INFER_CAP // 12 + 1  # FP32 [rows, 3]: just over the cap
    x = np.zeros((rows, 3), np.float32)
    ids = np.zeros(rows, np.int64)
    payload = request_of(
        ("x", "FP32", [rows, 3]), ("ids", "INT64", [rows]), raw=[x.tobytes(), ids.tobytes()]
    )
    status, code, message = refused(server.address, "ModelInfer", payload, bearer(acme))
    assert (status, code) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "PAYLOAD_TOO_LARGE")
    assert f"of at most {INFER_CAP} bytes, got {len(payload)}" in message
    # far past the cap: grpcio's core refuses it before any handler could read it (no code)
    far = b"\x00" * (4 * INFER_CAP)
    status, code, _ = refused(server.address, "ModelInfer", far, bearer(acme))
    assert (status, code) == (grpc.StatusCode.RESOURCE_EXHAUSTED, None)
    assert_serving(server, acme, local)


def test_a_client_opening_a_thousand_streams(
    served: tuple[GrpcServer, str, str], local: CompiledModel
) -> None:
    """One connection, 1,000 calls at once: each is answered (run; refused by the tenant's rate
    or slots, with its code; or refused by the connection's stream cap), and others are
    served."""
    server, acme, _ = served
    flooder = post_tenant(server, "flooder")  # its own rate and slots: acme's stay whole
    upload(server, flooder, "m", MODEL)
    payload = _tiny_request("m", X.tobytes(), shape=(4, 3))
    message = pb.ModelInferRequest.FromString(payload)
    message.raw_input_contents.append(IDS.tobytes())
    message.inputs.add(name="ids", datatype="INT64", shape=[3])
    payload = message.SerializeToString()

    async def flood() -> list[tuple[grpc.StatusCode, str | None]]:
        async with grpc.aio.insecure_channel(server.address) as channel:
            method = channel.unary_unary(METHOD + "ModelInfer")
            calls = [method(payload, metadata=bearer(flooder), timeout=120) for _ in range(1000)]
            outcomes = []
            for pending in calls:
                try:
                    await pending
                    outcomes.append((grpc.StatusCode.OK, None))
                except grpc.aio.AioRpcError as e:
                    outcomes.append((e.code(), dict(e.trailing_metadata() or ()).get(CODE)))
            return outcomes

    outcomes = asyncio.run(flood())
    allowed = {
        (grpc.StatusCode.OK, None),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_CONCURRENT"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED"),
        (grpc.StatusCode.UNAVAILABLE, "OVERLOADED"),
        (grpc.StatusCode.UNAVAILABLE, None),  # REFUSED_STREAM: over the connection's cap
    }
    assert len(outcomes) == 1000
    assert set(outcomes) <= allowed, set(outcomes) - allowed
    assert (grpc.StatusCode.OK, None) in outcomes
    assert_serving(server, acme, local)


# -- metrics --------------------------------------------------------------------------------------


def test_grpc_calls_are_counted_with_their_protocol(
    client: triton.InferenceServerClient, served: tuple[GrpcServer, str, str]
) -> None:
    server, acme, _ = served
    before = metrics(server)
    headers = {"authorization": f"Bearer {acme}"}
    for _ in range(3):
        client.infer("m", triton_inputs(), headers=headers)
    with pytest.raises(InferenceServerException):
        client.infer("nope", triton_inputs(), headers=headers)
    after = metrics(server)

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    requests = "graphgate_inference_requests_total"
    assert grew(requests, tenant="acme", model="m", protocol="grpc", status="OK") == 3
    assert grew(requests, tenant="acme", model="", protocol="grpc", status="NOT_FOUND") == 1
    failures = "graphgate_inference_failures_total"
    assert grew(failures, tenant="acme", model="", protocol="grpc", code="NOT_FOUND") == 1
    latency = "graphgate_inference_latency_seconds_count"
    assert grew(latency, tenant="acme", model="m", protocol="grpc") == 3


# -- TLS ------------------------------------------------------------------------------------------


def _certificates(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    ca_key, ca = folder / "ca.key", folder / "ca.pem"
    run = functools.partial(subprocess.run, check=True, capture_output=True, cwd=folder)
    run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key,
         "-out", ca, "-days", "2", "-subj", "/CN=graphgate-test-ca"])  # fmt: skip
    made = {"ca": ca}
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        key, csr, pem = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
        run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
             "-subj", f"/CN={name}"])  # fmt: skip
        extra = folder / f"{name}.ext"
        extra.write_text(extension + "\n" if extension else "basicConstraints=CA:FALSE\n")
        run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
             "-CAcreateserial", "-out", pem, "-days", "2", "-extfile", extra])  # fmt: skip
        made[f"{name}_key"], made[name] = key, pem
    return made


def test_tls_with_client_certificates(tmp_path: Path) -> None:
    certs = _certificates(tmp_path)
    env = {
        "GRAPHGATE_GRPC_TLS_CERT": str(certs["server"]),
        "GRAPHGATE_GRPC_TLS_KEY": str(certs["server_key"]),
        "GRAPHGATE_GRPC_TLS_CLIENT_CA": str(certs["ca"]),
    }
    server = GrpcServer(tmp_path / "data", env)
    server.start()
    try:
        key = post_tenant(server, "acme")
        upload(server, key, "tiny", TINY)
        headers = {"authorization": f"Bearer {key}"}
        tls = triton.InferenceServerClient(
            server.address,
            ssl=True,
            root_certificates=str(certs["ca"]),
            private_key=str(certs["client_key"]),
            certificate_chain=str(certs["client"]),
        )
        x = triton.InferInput("x", [2, 4], "FP32")
        x.set_data_from_numpy(TINY_X)
        assert tls.infer("tiny", [x], headers=headers).as_numpy("y").shape == (2, 4)
        tls.close()
        anonymous = triton.InferenceServerClient(
            server.address, ssl=True, root_certificates=str(certs["ca"])
        )
        with pytest.raises(InferenceServerException) as info:  # no client certificate
            anonymous.infer("tiny", [x], headers=headers, client_timeout=30)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        anonymous.close()
        plaintext = triton.InferenceServerClient(server.address)
        with pytest.raises(InferenceServerException) as info:
            plaintext.infer("tiny", [x], headers=headers, client_timeout=30)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        plaintext.close()
    finally:
        server.stop()


# -- the command line -------------------------------------------------------------------------------


def test_cli_infer_over_grpc(
    served: tuple[GrpcServer, str, str], local: CompiledModel, tmp_path: Path
) -> None:
    server, acme, _ = served
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "ids.npy", IDS)
    env = {
        "GRAPHGATE_URL": server.url,
        "GRAPHGATE_API_KEY": acme,
        "GRAPHGATE_GRPC_URL": f"grpc://{server.address}",
    }
    args = ["infer", "m", "-i", f"x={tmp_path / 'x.npy'}", "-i", f"ids={tmp_path / 'ids.npy'}"]
    out = tmp_path / "out.npz"
    result = CliRunner().invoke(cli, [*args, "--grpc", "-o", str(out)], env=env)
    assert result.exit_code == 0, result.output
    want = local.run({"x": X, "ids": IDS})
    with np.load(out) as got:
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=0)
        np.testing.assert_array_equal(got["ids_out"], IDS)
    missing = CliRunner().invoke(cli, ["infer", "secret", *args[2:], "--grpc"], env=env)
    assert missing.exit_code == 2
    assert "error [NOT_FOUND]: no model 'secret'" in missing.output
    nobody = {**env, "GRAPHGATE_GRPC_URL": f"grpc://127.0.0.1:{_free_port()}"}
    unreachable = CliRunner().invoke(cli, [*args, "--grpc"], env=nobody)
    assert unreachable.exit_code == 2 and "graphgate: cannot reach 127.0.0.1:" in unreachable.output
