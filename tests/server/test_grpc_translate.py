"""server/grpc/ without a server: the generated code matches its protos, gRPC messages become the
V2 requests the codec checks (typed contents in their datatype's field, in the right number),
answers become messages, and every error class reaches gRPC with a status and its code."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest
from pydantic import ValidationError

from executor.errors import DeadlineExceeded, OutputMismatch, RunCancelled
from graph_proto.types import DType
from server.console import overview
from server.dispatch.answer import AnswerSpec, Budget, BufferSink, OutputSpec, encode
from server.errors import NotFound, PayloadTooLarge, Unauthorized, WorkerCrashed
from server.grpc import errors, regenerate, translate
from server.grpc import grpc_predict_v2_pb2 as pb
from server.http import errors as http_errors
from server.http import limits as http_limits
from server.services.limits import Overloaded, RateLimited, TooManyConcurrent
from server.services.metrics import Metrics
from server.settings import Settings
from server.v2 import codec
from server.v2.errors import (
    InferMalformed,
    InferRequestInvalid,
    InferUnsupported,
    InputData,
    InputDataSource,
    InputElementCount,
    InputShape,
)
from validator import TensorSpec

INPUTS = (
    TensorSpec("a", DType.INT8, (-1, 2)),
    TensorSpec("b", DType.BOOL, (2,)),
    TensorSpec("c", DType.UINT8, (2,)),
)
OUTPUTS = (TensorSpec("y", DType.FP32, (-1, 2)), TensorSpec("h", DType.FP16, (2,)))


def test_the_generated_code_matches_the_protos() -> None:
    assert regenerate.main(["--check"]) == 0


def _request(**contents: list[object]) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    a = request.inputs.add(name="a", datatype="INT8", shape=[2, 2])
    a.contents.int_contents.extend(contents.get("a", [-128, 0, 1, 127]))
    b = request.inputs.add(name="b", datatype="BOOL", shape=[2])
    b.contents.bool_contents.extend(contents.get("b", [True, False]))
    c = request.inputs.add(name="c", datatype="UINT8", shape=[2])
    c.contents.uint_contents.extend(contents.get("c", [0, 255]))
    request.outputs.add(name="y")
    return request


def _decoded(request: pb.ModelInferRequest) -> codec.InferRequest:
    return translate.to_v2(request, OUTPUTS).decode(INPUTS, OUTPUTS)


def test_typed_contents_become_the_inputs_datatypes() -> None:
    decoded = _decoded(_request())
    np.testing.assert_array_equal(decoded.feeds["a"], np.array([[-128, 0], [1, 127]], np.int8))
    assert decoded.feeds["a"].dtype == np.int8
    np.testing.assert_array_equal(decoded.feeds["b"], np.array([True, False]))
    np.testing.assert_array_equal(decoded.feeds["c"], np.array([0, 255], np.uint8))
    assert [out.spec.name for out in decoded.outputs] == ["y"]
    assert all(out.binary for out in decoded.outputs)


def _as_v2_body(v2: translate.V2Request) -> tuple[bytes, str]:
    """The V2 binary body tritonclient.http would send for the same request: the document
    written as JSON, the inputs' bytes after it; and its Inference-Header-Content-Length."""
    head = json.dumps(v2.document).encode()
    return head + bytes(v2.binary), str(len(head))


def _raw_request(x: bytes, shape: list[int], **params: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", id="r-1", raw_input_contents=[x])
    request.inputs.add(name="x", datatype="FP32", shape=shape)
    for name, value in params.items():
        request.parameters[name].int64_param = value
    request.outputs.add(name="y")
    return request


RAW_INPUTS = (TensorSpec("x", DType.FP32, (-1, 2)),)


def test_the_document_reads_as_the_same_request_written_as_json() -> None:
    x = np.array([[1.5, -2.0], [0.25, 3.0]], np.float32)
    v2 = translate.to_v2(_raw_request(x.tobytes(), [2, 2], timeout=5000), OUTPUTS)
    direct = v2.decode(RAW_INPUTS, OUTPUTS)
    via_json = codec.decode_request(*_as_v2_body(v2), RAW_INPUTS, OUTPUTS)
    np.testing.assert_array_equal(direct.feeds["x"], x)
    np.testing.assert_array_equal(via_json.feeds["x"], x)
    assert (direct.id, direct.timeout_us) == (via_json.id, via_json.timeout_us) == ("r-1", 5000)
    assert direct.outputs == via_json.outputs
    assert [out.spec.name for out in direct.outputs] == ["y"]


@pytest.mark.parametrize(
    ("x", "shape", "params"),
    [
        (bytes(12), [2, 2], {}),  # 12 bytes for 4 FP32 elements
        (bytes(16), [2, 2, 1], {}),  # a dim too many
        (bytes(16), [2, 2], {"timeout": -1}),
    ],
)
def test_the_document_is_refused_as_the_same_request_written_as_json(
    x: bytes, shape: list[int], params: dict[str, int]
) -> None:
    v2 = translate.to_v2(_raw_request(x, shape, **params), OUTPUTS)
    with pytest.raises(InferRequestInvalid) as direct:
        v2.decode(RAW_INPUTS, OUTPUTS)
    with pytest.raises(InferRequestInvalid) as via_json:
        codec.decode_request(*_as_v2_body(v2), RAW_INPUTS, OUTPUTS)
    assert type(direct.value) is type(via_json.value)
    assert str(direct.value) == str(via_json.value)


@pytest.mark.parametrize(
    ("contents", "error", "message"),
    [
        ({"a": [0, 0, 0, 128]}, InputData, "expected INT8 integers from -128 to 127, got 128"),
        ({"c": [0, 256]}, InputData, "expected UINT8 integers from 0 to 255, got 256"),
        ({"a": [1, 2, 3]}, InputElementCount, "expected 4 elements for shape [2, 2], got 3"),
    ],
)
def test_typed_contents_out_of_range_or_count(
    contents: dict[str, list[object]], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        _decoded(_request(**contents))
    assert message in str(info.value)


def test_contents_in_another_datatypes_field() -> None:
    request = _request()
    request.inputs[0].contents.fp32_contents.append(1.0)
    with pytest.raises(InputDataSource) as info:
        translate.to_v2(request, OUTPUTS)
    assert str(info.value) == (
        "input 'a': expected INT8 elements in contents.int_contents, got contents.fp32_contents"
    )


def test_raw_contents_one_per_input() -> None:
    request = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"\x00" * 4])
    request.inputs.add(name="a", datatype="INT8", shape=[2, 2])
    request.inputs.add(name="b", datatype="BOOL", shape=[2])
    with pytest.raises(InputDataSource) as info:
        translate.to_v2(request, OUTPUTS)
    assert str(info.value) == "raw_input_contents: expected one entry per input (2), got 1"


def test_fp16_travels_raw_only() -> None:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="a", datatype="FP16", shape=[1])
    with pytest.raises(InferUnsupported):
        translate.to_v2(request, OUTPUTS)
    typed_out = _request()
    del typed_out.outputs[:]
    typed_out.outputs.add(name="h").parameters["binary_data"].bool_param = False
    with pytest.raises(InferUnsupported) as info:
        translate.to_v2(typed_out, OUTPUTS)
    assert "'h': FP16 elements travel in raw_output_contents only" in str(info.value)


def test_output_parameters() -> None:
    mixed = _request()
    mixed.outputs.add(name="h").parameters["binary_data"].bool_param = False
    with pytest.raises(InferUnsupported):
        translate.to_v2(mixed, OUTPUTS)
    wrong = _request()
    wrong.parameters["binary_data_output"].string_param = "yes"
    with pytest.raises(InferMalformed) as info:
        translate.to_v2(wrong, OUTPUTS)
    assert (
        str(info.value) == "request parameter 'binary_data_output': expected a boolean, got 'yes'"
    )
    typed = _request()
    typed.parameters["binary_data_output"].bool_param = False
    assert translate.to_v2(typed, OUTPUTS).typed
    assert not translate.to_v2(_request(), OUTPUTS).typed


def test_shapes_the_codec_refuses_are_not_counted_here() -> None:
    request = _request()
    request.inputs[0].shape[:] = [2**40, 2]
    with pytest.raises(InputShape):
        _decoded(request)


def test_answers_become_messages_raw_or_typed() -> None:
    y = np.array([[1.5, -2.0], [0.25, 3.0]], np.float32)
    # The answer as the worker encodes it (server/dispatch/answer.py), y as raw bytes.
    spec = AnswerSpec("m", "3", "r-9", (OutputSpec("y", "FP32", "<f4", True),), Budget())
    sink = BufferSink()
    _length, header = encode(spec, {"y": y}, sink, lambda: None)
    assert header is not None
    body = bytes(sink.buffer)
    headers = {"content-type": codec.BINARY_CONTENT, codec.HEADER_LENGTH: str(header)}
    raw = translate.from_v2(body, headers, typed=False)
    assert (raw.model_name, raw.model_version, raw.id) == ("m", "3", "r-9")
    assert [(o.name, o.datatype, list(o.shape)) for o in raw.outputs] == [("y", "FP32", [2, 2])]
    assert np.frombuffer(raw.raw_output_contents[0], np.float32).tolist() == y.ravel().tolist()
    typed = translate.from_v2(body, headers, typed=True)
    assert not typed.raw_output_contents
    assert list(typed.outputs[0].contents.fp32_contents) == y.ravel().tolist()


def test_every_http_status_has_a_grpc_status() -> None:
    statuses = {status for _kind, status in http_errors.STATUS}
    statuses |= set(http_errors.HTTP_CODES) | {s for s, _ in http_limits.CODES.values()}
    assert statuses - {405, 408, 414, 415} <= set(errors.GRPC_STATUS)


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (Unauthorized("no key"), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHORIZED"),
        (NotFound("no model"), grpc.StatusCode.NOT_FOUND, "NOT_FOUND"),
        (InputShape("bad"), grpc.StatusCode.INVALID_ARGUMENT, "INPUT_SHAPE"),
        (PayloadTooLarge("big"), grpc.StatusCode.RESOURCE_EXHAUSTED, "PAYLOAD_TOO_LARGE"),
        (RateLimited("fast", 2), grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED"),
        (TooManyConcurrent("many", 1), grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_CONCURRENT"),
        (Overloaded("full", 1), grpc.StatusCode.UNAVAILABLE, "OVERLOADED"),
        (WorkerCrashed("died"), grpc.StatusCode.UNAVAILABLE, "WORKER_CRASHED"),
        (DeadlineExceeded("late"), grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"),
        (RunCancelled("gone"), grpc.StatusCode.CANCELLED, "CANCELLED"),
        (OutputMismatch("bug"), grpc.StatusCode.INTERNAL, "INTERNAL"),
        (KeyError("bug"), grpc.StatusCode.INTERNAL, "INTERNAL"),
    ],
)
def test_errors_become_statuses_with_their_codes(
    error: Exception, status: grpc.StatusCode, code: str
) -> None:
    assert errors.status_of(error) == (status, code)


def test_throttles_carry_a_retry_hint() -> None:
    assert errors.trailing_metadata(RateLimited("fast", 2), "RATE_LIMITED") == (
        ("graphgate-code", "RATE_LIMITED"),
        ("retry-after", "2"),
    )
    assert errors.trailing_metadata(NotFound("x"), "NOT_FOUND") == (
        ("graphgate-code", "NOT_FOUND"),
    )


def test_tls_settings_come_whole(tmp_path: Path) -> None:
    pem = tmp_path / "x.pem"
    with pytest.raises(ValidationError, match="expected both or neither, got one"):
        Settings(grpc_tls_cert=pem)
    with pytest.raises(ValidationError, match="expected with grpc_tls_cert and grpc_tls_key"):
        Settings(grpc_tls_client_ca=pem)
    assert Settings(grpc_tls_cert=pem, grpc_tls_key=pem).grpc_tls_cert == pem


def test_the_console_overview_counts_each_protocol() -> None:
    metrics = Metrics()
    for protocol, status, code in (
        ("json", "200", None),
        ("binary", "200", None),
        ("binary", "400", "INPUT_SHAPE"),
        ("grpc", "OK", None),
        ("grpc", "NOT_FOUND", "NOT_FOUND"),
        ("grpc", "OK", None),
    ):
        metrics.inference("", "m", protocol=protocol, status=status, code=code, seconds=0.001)
    assert overview.by_protocol(metrics) == [("HTTP", 3, 1), ("gRPC", 3, 1)]
    assert sum(p.requests for p in metrics.minutes.last_hour()) == 6
