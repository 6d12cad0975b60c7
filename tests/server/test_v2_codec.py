"""The V2 codec and inference service on real compiled models: every datatype, JSON and binary
both ways, and every malformed request with its code and message."""

from __future__ import annotations

import functools
import gzip
import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from executor import SessionOptions
from executor.errors import (
    ExecutionError,
    MissingInput,
    UnexpectedInput,
    WrongDType,
    WrongRank,
    WrongShape,
)
from graph_proto.types import DType
from server.dispatch import PoolSettings, RemoteModel, WorkerPool
from server.errors import ServiceError
from server.services import inference
from server.services.types import LoadedModel
from server.v2 import codec
from server.v2.errors import (
    BinarySizeMismatch,
    InferBodyTooLarge,
    InferHeaderLength,
    InferMalformed,
    InferUnsupported,
    InputData,
    InputDataSource,
    InputDatatype,
    InputDuplicate,
    InputElementCount,
    InputMissing,
    InputRank,
    InputShape,
    InputUnknown,
    OutputDuplicate,
    OutputUnknown,
)
from tests.support.builders import GraphBuilder, V
from tests.support.v2 import binary_request
from validator import Policy

# V2 datatype, dtype and values that reach each end of the type's range.
DATATYPES: list[tuple[str, DType, list[Any]]] = [
    ("BOOL", DType.BOOL, [True, False, True, True, False, False]),
    ("UINT8", DType.UINT8, [0, 1, 2, 127, 128, 255]),
    ("INT8", DType.INT8, [-128, -1, 0, 1, 2, 127]),
    ("INT16", DType.INT16, [-32768, -1, 0, 1, 300, 32767]),
    ("INT32", DType.INT32, [-(2**31), -1, 0, 1, 70000, 2**31 - 1]),
    ("INT64", DType.INT64, [-(2**63), -1, 0, 1, 2**40, 2**63 - 1]),
    ("FP16", DType.FP16, [-65504.0, -1.5, 0.0, 0.25, 1.0, 65504.0]),
    ("FP32", DType.FP32, [-3.0e38, -1.25, 0.0, 1e-30, 2.5, 3.0e38]),
    ("FP64", DType.FP64, [-1e300, -1.125, 0.0, 1e-300, 2.5, 1e300]),
]


# Models run in worker processes, as in the server (server/dispatch): one worker for this module.
_POOL = WorkerPool(PoolSettings(workers=1))


def _compiled(g: GraphBuilder) -> RemoteModel:
    program, params = g.program_bytes(), g.params_bytes()
    options = SessionOptions(use_cuda=False)
    return _POOL.compile(program, params, Policy(), options, lambda: (program, params))


@functools.cache
def identity(dtype: DType, dims: tuple[int, ...] = (-1, 3)) -> LoadedModel:
    """y = assign(x) over x[dims] of one dtype."""
    g = GraphBuilder()
    g.feed("x", dtype, list(dims))
    g.node("assign", {"X": ["x"]}, {"Out": [V("y", dims, dtype)]})
    g.fetch("y")
    return LoadedModel("tenant", "identity", 1, _compiled(g))


@functools.cache
def pair() -> LoadedModel:
    """Two inputs, two outputs: y = assign(x) FP32[-1, 3], m = assign(mask) BOOL[-1]."""
    g = GraphBuilder()
    g.feed("x", DType.FP32, [-1, 3])
    g.feed("mask", DType.BOOL, [-1])
    g.node("assign", {"X": ["x"]}, {"Out": [V("y", [-1, 3], DType.FP32)]})
    g.node("assign", {"X": ["mask"]}, {"Out": [V("m", [-1], DType.BOOL)]})
    g.fetch("y")
    g.fetch("m")
    return LoadedModel("tenant", "pair", 3, _compiled(g))


def _json(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def split_response(body: bytes, headers: Mapping[str, str]) -> tuple[dict[str, Any], bytes]:
    length = int(headers.get(codec.HEADER_LENGTH, len(body)))
    doc: dict[str, Any] = json.loads(body[:length])
    return doc, body[length:]


def decode(model: LoadedModel, body: bytes, header_length: str | None = None) -> codec.InferRequest:
    program = model.compiled.program
    return codec.decode_request(body, header_length, program.inputs, program.outputs)


def tensor(name: str, datatype: str, shape: list[int], data: Any) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


# -- metadata ------------------------------------------------------------------------------


def test_metadata_has_v2_datatypes_and_variable_dims() -> None:
    meta = inference.metadata(pair())
    assert (meta.name, meta.version, meta.platform) == ("pair", 3, "onnxruntime_onnx")
    assert [codec.tensor_metadata(spec) for spec in meta.inputs] == [
        {"name": "x", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "mask", "datatype": "BOOL", "shape": [-1]},
    ]
    assert [codec.tensor_metadata(spec) for spec in meta.outputs] == [
        {"name": "y", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "m", "datatype": "BOOL", "shape": [-1]},
    ]


@pytest.mark.parametrize(("datatype", "dtype", "values"), DATATYPES, ids=[d[0] for d in DATATYPES])
def test_every_datatype_maps_both_ways(datatype: str, dtype: DType, values: list[Any]) -> None:
    assert codec.DATATYPES[dtype] == datatype
    meta = inference.metadata(identity(dtype))
    assert [codec.tensor_metadata(s) for s in meta.inputs] == [
        {"name": "x", "datatype": datatype, "shape": [-1, 3]}
    ]
    assert [codec.tensor_metadata(s) for s in meta.outputs] == [
        {"name": "y", "datatype": datatype, "shape": [-1, 3]}
    ]


# -- every datatype, JSON and binary, in and out ----------------------------------------------


@pytest.mark.parametrize(("datatype", "dtype", "values"), DATATYPES, ids=[d[0] for d in DATATYPES])
@pytest.mark.parametrize("nested", [True, False], ids=["nested", "flat"])
def test_json_in_json_out(datatype: str, dtype: DType, values: list[Any], nested: bool) -> None:
    expected = np.array(values, dtype.numpy).reshape(2, 3)
    data = expected.tolist() if nested else values
    body = _json({"id": "r-1", "inputs": [tensor("x", datatype, [2, 3], data)]})

    feed = decode(identity(dtype), body).feeds["x"]
    assert feed.dtype == dtype.numpy
    np.testing.assert_array_equal(feed, expected)

    out, headers = inference.infer(identity(dtype), body, {})
    assert headers == {"content-type": "application/json"}
    doc = json.loads(out)
    assert doc["model_name"] == "identity" and doc["model_version"] == "1" and doc["id"] == "r-1"
    [y] = doc["outputs"]
    assert (y["name"], y["datatype"], y["shape"]) == ("y", datatype, [2, 3])
    np.testing.assert_array_equal(np.array(y["data"], dtype.numpy).reshape(2, 3), expected)


@pytest.mark.parametrize(("datatype", "dtype", "values"), DATATYPES, ids=[d[0] for d in DATATYPES])
def test_binary_in_binary_out(datatype: str, dtype: DType, values: list[Any]) -> None:
    x = np.array(values, dtype.numpy).reshape(2, 3)
    doc = {
        "inputs": [
            {
                "name": "x",
                "datatype": datatype,
                "shape": [2, 3],
                "parameters": {"binary_data_size": x.nbytes},
            }
        ],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }
    body, headers = binary_request(doc, [x])
    out, out_headers = inference.infer(identity(dtype), body, headers)

    assert out_headers["content-type"] == "application/octet-stream"
    meta, raw = split_response(out, out_headers)
    assert meta == {
        "model_name": "identity",
        "model_version": "1",
        "outputs": [
            {
                "name": "y",
                "datatype": datatype,
                "shape": [2, 3],
                "parameters": {"binary_data_size": x.nbytes},
            }
        ],
    }
    assert raw == x.tobytes()


def test_json_and_binary_inputs_mix_and_outputs_choose_their_form() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    mask = np.array([True, False, True, True])
    doc = {
        "id": "mixed",
        "inputs": [
            tensor("mask", "BOOL", [4], mask.tolist()),
            {
                "name": "x",
                "datatype": "FP32",
                "shape": [2, 3],
                "parameters": {"binary_data_size": 24},
            },
        ],
        # request-level binary for every output, overridden to JSON for m
        "parameters": {"binary_data_output": True},
        "outputs": [{"name": "m", "parameters": {"binary_data": False}}, {"name": "y"}],
    }
    body, headers = binary_request(doc, [x])
    out, out_headers = inference.infer(pair(), body, headers)

    meta, raw = split_response(out, out_headers)
    assert meta["id"] == "mixed"
    assert [o["name"] for o in meta["outputs"]] == ["m", "y"]
    assert meta["outputs"][0]["data"] == mask.tolist()
    assert meta["outputs"][1]["parameters"] == {"binary_data_size": 24}
    assert raw == x.tobytes()


def test_outputs_default_to_all_in_model_order_and_json() -> None:
    body = _json(
        {"inputs": [tensor("x", "FP32", [1, 3], [1, 2, 3]), tensor("mask", "BOOL", [0], [])]}
    )
    out, headers = inference.infer(pair(), body, {})
    doc = json.loads(out)
    assert headers["content-type"] == "application/json" and "id" not in doc
    assert doc["outputs"] == [
        {"name": "y", "datatype": "FP32", "shape": [1, 3], "data": [1.0, 2.0, 3.0]},
        {"name": "m", "datatype": "BOOL", "shape": [0], "data": []},
    ]


def test_request_level_binary_output_applies_to_all_outputs() -> None:
    body = _json(
        {
            "inputs": [
                tensor("x", "FP32", [1, 3], [1, 2, 3]),
                tensor("mask", "BOOL", [2], [True, False]),
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    out, headers = inference.infer(pair(), body, {})
    meta, raw = split_response(out, headers)
    assert [o["parameters"]["binary_data_size"] for o in meta["outputs"]] == [12, 2]
    assert raw == np.array([1, 2, 3], np.float32).tobytes() + b"\x01\x00"


def test_a_subset_of_outputs_can_be_requested() -> None:
    body = _json(
        {
            "inputs": [tensor("x", "FP32", [1, 3], [1, 2, 3]), tensor("mask", "BOOL", [1], [True])],
            "outputs": [{"name": "m"}],
        }
    )
    doc = json.loads(inference.infer(pair(), body, {})[0])
    assert doc["outputs"] == [{"name": "m", "datatype": "BOOL", "shape": [1], "data": [True]}]


def test_results_equal_the_executor_run() -> None:
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    mask = np.array([False, True])
    doc = {
        "inputs": [
            {
                "name": "x",
                "datatype": "FP32",
                "shape": [4, 3],
                "parameters": {"binary_data_size": 48},
            },
            {
                "name": "mask",
                "datatype": "BOOL",
                "shape": [2],
                "parameters": {"binary_data_size": 2},
            },
        ],
        "parameters": {"binary_data_output": True},
    }
    body, headers = binary_request(doc, [x, mask])
    meta, raw = split_response(*inference.infer(pair(), body, headers))
    local = pair().compiled.run({"x": x, "mask": mask})
    assert raw == local["y"].tobytes() + local["m"].tobytes()
    assert [o["shape"] for o in meta["outputs"]] == [[4, 3], [2]]


def test_unaligned_binary_inputs_are_read_correctly() -> None:
    mask = np.array([True, False, True])
    x = np.arange(3, dtype=np.float64).reshape(1, 3)
    doc = {
        "inputs": [
            {
                "name": "mask",
                "datatype": "BOOL",
                "shape": [3],
                "parameters": {"binary_data_size": 3},
            },
            {
                "name": "x",
                "datatype": "FP32",
                "shape": [1, 3],
                "parameters": {"binary_data_size": 12},
            },
        ]
    }
    body, headers = binary_request(doc, [mask, x.astype(np.float32)])
    feeds = decode(pair(), body, headers["Inference-Header-Content-Length"]).feeds
    np.testing.assert_array_equal(feeds["x"], x.astype(np.float32))
    np.testing.assert_array_equal(feeds["mask"], mask)
    doc_out = json.loads(inference.infer(pair(), body, headers)[0])
    assert doc_out["outputs"][0]["data"] == [0.0, 1.0, 2.0]


def test_raw_binary_request_is_the_single_input_with_binary_outputs() -> None:
    x = np.arange(6, dtype=np.int32)
    out, headers = inference.infer(
        identity(DType.INT32), x.tobytes(), {"Inference-Header-Content-Length": "0"}
    )
    meta, raw = split_response(out, headers)
    assert meta["outputs"][0]["shape"] == [2, 3]
    assert raw == x.tobytes()


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
    ids=["gzip", "deflate"],
)
def test_compressed_bodies_are_inflated(encoding: str, compress: Any) -> None:
    body = _json({"inputs": [tensor("x", "INT64", [1, 3], [1, 2, 3])]})
    out, _ = inference.infer(identity(DType.INT64), compress(body), {"Content-Encoding": encoding})
    assert json.loads(out)["outputs"][0]["data"] == [1, 2, 3]


def test_inflating_past_the_cap_is_refused() -> None:
    body = gzip.compress(_json({"inputs": [tensor("x", "INT64", [1, 3], [1, 2, 3])]}) + b" " * 5000)
    with pytest.raises(InferBodyTooLarge) as info:
        inference.infer(
            identity(DType.INT64), body, {"content-encoding": "gzip"}, max_body_bytes=1000
        )
    assert str(info.value) == "decompressed request body exceeds the 1000-byte limit"
    assert info.value.code == "PAYLOAD_TOO_LARGE"


# -- malformed requests: one code each, messages "expected ..., got ..." ---------------------

X = {"name": "x", "datatype": "FP32", "shape": [1, 3]}
MASK = tensor("mask", "BOOL", [1], [True])


def _x(**changes: Any) -> dict[str, Any]:
    return {**X, "data": [1, 2, 3], **changes}


def _req(*inputs: Any, **fields: Any) -> bytes:
    return _json({"inputs": list(inputs), **fields})


BAD: list[tuple[str, bytes, str | None, type[ServiceError], str]] = [
    (
        "not-json",
        b'{"inputs": [',
        None,
        InferMalformed,
        "expected a JSON inference request, got invalid JSON: Expecting value: line 1 column 13 (char 12)",
    ),
    (
        "not-an-object",
        b"[1, 2]",
        None,
        InferMalformed,
        "expected a JSON object as the request, got an array",
    ),
    ("no-inputs", b"{}", None, InferMalformed, "request 'inputs': expected an array, got nothing"),
    (
        "deep-json",
        b"[" * 100000 + b"]" * 100000,
        None,
        InferMalformed,
        "expected a JSON inference request, got JSON nested too deeply",
    ),
    (
        "id-not-string",
        _req(_x(), MASK, id=7),
        None,
        InferMalformed,
        "'id': expected a string, got the number 7",
    ),
    (
        "input-not-object",
        _req("x"),
        None,
        InferMalformed,
        "inputs[0]: expected an object, got the string 'x'",
    ),
    (
        "name-missing",
        _req({"datatype": "FP32"}),
        None,
        InferMalformed,
        "inputs[0] 'name': expected a string, got nothing",
    ),
    (
        "wrong-datatype",
        _req(_x(datatype="INT64"), MASK),
        None,
        InputDatatype,
        "input 'x': expected datatype 'FP32', got 'INT64'",
    ),
    (
        "unknown-datatype",
        _req(_x(datatype="float32"), MASK),
        None,
        InputDatatype,
        "input 'x': expected datatype 'FP32', got 'float32'",
    ),
    (
        "wrong-rank",
        _req(_x(shape=[3]), MASK),
        None,
        InputRank,
        "input 'x': expected shape [-1, 3], got [3]",
    ),
    (
        "wrong-fixed-dim",
        _req(_x(shape=[1, 4], data=[1, 2, 3, 4]), MASK),
        None,
        InputShape,
        "input 'x': expected shape [-1, 3], got [1, 4]",
    ),
    (
        "negative-dim",
        _req(_x(shape=[-1, 3]), MASK),
        None,
        InputShape,
        "input 'x': expected a shape of integers from 0 to 2147483647, got [-1, 3]",
    ),
    (
        "huge-dim",
        _req(_x(shape=[2**40, 0], data=[]), MASK),
        None,
        InputShape,
        "input 'x': expected a shape of integers from 0 to 2147483647, got [1099511627776, 0]",
    ),
    (
        "element-count",
        _req(_x(shape=[2, 3]), MASK),
        None,
        InputElementCount,
        "input 'x': expected 6 elements for shape [2, 3], got 3",
    ),
    (
        "nested-other-shape",
        _req(_x(shape=[2, 3], data=[[1, 2], [3, 4], [5, 6]]), MASK),
        None,
        InputShape,
        "input 'x': expected data flat or nested as [2, 3], got it nested as [3, 2]",
    ),
    (
        "ragged",
        _req(_x(shape=[2, 3], data=[[1, 2, 3], [4, 5]]), MASK),
        None,
        InputShape,
        "input 'x': expected data flat or nested as [2, 3], got arrays of uneven lengths",
    ),
    (
        "strings-as-floats",
        _req(_x(data=["1", "2", "3"]), MASK),
        None,
        InputData,
        "input 'x': expected FP32 numbers, got strings",
    ),
    (
        "numbers-as-bools",
        _req(_x(), tensor("mask", "BOOL", [1], [1])),
        None,
        InputData,
        "input 'mask': expected BOOL values true/false, got integers",
    ),
    (
        "both-sources",
        _req(_x(parameters={"binary_data_size": 12}), MASK),
        None,
        InputDataSource,
        "input 'x': expected exactly one of 'data' or 'parameters.binary_data_size', got both",
    ),
    (
        "no-source",
        _req(X, MASK),
        None,
        InputDataSource,
        "input 'x': expected exactly one of 'data' or 'parameters.binary_data_size', got neither",
    ),
    (
        "shared-memory",
        _req({**X, "parameters": {"shared_memory_region": "r"}}, MASK),
        None,
        InferUnsupported,
        "input 'x': shared memory is not supported; send the data inline",
    ),
    (
        "missing-input",
        _req(_x()),
        None,
        InputMissing,
        "expected inputs ['x', 'mask'], got ['x']: missing ['mask']",
    ),
    (
        "unknown-input",
        _req(_x(), MASK, tensor("z", "FP32", [1], [1])),
        None,
        InputUnknown,
        "input 'z': expected one of ['x', 'mask'], got an unknown name",
    ),
    (
        "duplicate-input",
        _req(_x(), _x(), MASK),
        None,
        InputDuplicate,
        "input 'x': expected once, got twice",
    ),
    (
        "unknown-output",
        _req(_x(), MASK, outputs=[{"name": "probs"}]),
        None,
        OutputUnknown,
        "requested output 'probs': expected one of ['y', 'm'], got an unknown name",
    ),
    (
        "duplicate-output",
        _req(_x(), MASK, outputs=[{"name": "y"}, {"name": "y"}]),
        None,
        OutputDuplicate,
        "requested output 'y': expected once, got twice",
    ),
    (
        "binary-data-not-bool",
        _req(_x(), MASK, outputs=[{"name": "y", "parameters": {"binary_data": 1}}]),
        None,
        InferMalformed,
        "requested output 'y' 'binary_data': expected a boolean, got the number 1",
    ),
    (
        "classification",
        _req(_x(), MASK, outputs=[{"name": "y", "parameters": {"classification": 3}}]),
        None,
        InferUnsupported,
        "requested output 'y': classification is not supported",
    ),
    (
        "header-length-not-int",
        _req(_x(), MASK),
        "12a",
        InferHeaderLength,
        "Inference-Header-Content-Length: expected an integer from 0 to 151 (the body length), got '12a'",
    ),
    (
        "header-length-negative",
        _req(_x(), MASK),
        "-5",
        InferHeaderLength,
        "Inference-Header-Content-Length: expected an integer from 0 to 151 (the body length), got '-5'",
    ),
    (
        "header-length-past-body",
        _req(_x(), MASK),
        "152",
        InferHeaderLength,
        "Inference-Header-Content-Length: expected an integer from 0 to 151 (the body length), got '152'",
    ),
    (
        "header-length-cuts-json",
        _req(_x(), MASK),
        "20",
        InferMalformed,
        "expected a JSON inference request, got invalid JSON: Expecting value: line 1 column 21 (char 20)",
    ),
    (
        "binary-without-header-length",
        _req(_x(), MASK) + b"\x00\x01",
        None,
        InferMalformed,
        "expected a JSON inference request, got invalid JSON: Extra data: line 1 column 152 (char 151)",
    ),
]


@pytest.mark.parametrize(
    ("body", "header_length", "error", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD],
)
def test_bad_requests_raise_their_error(
    body: bytes, header_length: str | None, error: type[ServiceError], message: str
) -> None:
    with pytest.raises(ServiceError) as info:
        decode(pair(), body, header_length)
    assert type(info.value) is error
    assert str(info.value) == message


def _binary_x(x_size: object, tensors: Sequence[np.ndarray]) -> tuple[bytes, str]:
    """x FP32[1, 3] and mask BOOL[1], both declared binary; `tensors` are the bytes sent."""
    mask = {"name": "mask", "datatype": "BOOL", "shape": [1], "parameters": {"binary_data_size": 1}}
    doc = {"inputs": [{**X, "parameters": {"binary_data_size": x_size}}, mask]}
    body, headers = binary_request(doc, tensors)
    return body, headers["Inference-Header-Content-Length"]


X_BYTES = np.array([[1, 2, 3]], np.float32)
TRUE = np.array([True])

BAD_BINARY: list[tuple[str, tuple[bytes, str], type[ServiceError], str]] = [
    (
        "size-disagrees-with-shape",
        _binary_x(8, [X_BYTES[:, :2], TRUE]),
        BinarySizeMismatch,
        "input 'x': expected binary_data_size 12 (FP32 [1, 3]), got 8",
    ),
    (
        "body-too-short",
        _binary_x(12, [X_BYTES]),
        BinarySizeMismatch,
        "input 'mask': expected 1 binary bytes, got 0 left in the body",
    ),
    (
        "trailing-bytes",
        _binary_x(12, [X_BYTES, TRUE, TRUE]),
        BinarySizeMismatch,
        "binary data: expected 13 bytes after the JSON header (the sum of the inputs' binary_data_size), got 14",
    ),
    (
        "bool-byte-not-0-or-1",
        _binary_x(12, [X_BYTES, np.array([7], np.uint8)]),
        InputData,
        "input 'mask': expected BOOL bytes 0 or 1, got 7",
    ),
    (
        "size-not-an-int",
        _binary_x("12", [X_BYTES, TRUE]),
        InferMalformed,
        "input 'x' 'binary_data_size': expected a non-negative integer, got the string '12'",
    ),
]


@pytest.mark.parametrize(
    ("sent", "error", "message"), [pytest.param(*case[1:], id=case[0]) for case in BAD_BINARY]
)
def test_bad_binary_requests_raise_their_error(
    sent: tuple[bytes, str], error: type[ServiceError], message: str
) -> None:
    body, header_length = sent
    with pytest.raises(ServiceError) as info:
        decode(pair(), body, header_length)
    assert type(info.value) is error
    assert str(info.value) == message


BAD_VALUES: list[tuple[str, DType, list[Any], str]] = [
    ("uint8-overflow", DType.UINT8, [0, 256, 1], "expected UINT8 integers from 0 to 255, got 256"),
    (
        "int8-underflow",
        DType.INT8,
        [-129, 0, 1],
        "expected INT8 integers from -128 to 127, got -129",
    ),
    ("int-fraction", DType.INT32, [1.5, 0, 1], "expected INT32 integers, got non-integer numbers"),
    (
        "int64-overflow",
        DType.INT64,
        [2**64, 0, 1],
        "expected INT64 integers, got integers outside the 64-bit range",
    ),
    (
        "null",
        DType.FP32,
        [None, 0, 1],
        "expected FP32 numbers, got values that are not all numbers (null, objects, mixed)",
    ),
    ("bool-as-float", DType.FP64, [True, False, True], "expected FP64 numbers, got booleans"),
    (
        "fp16-overflow",
        DType.FP16,
        [1e5, 0, 1],
        "expected FP16 numbers from -65504 to 65504, got 100000.0",
    ),
]


@pytest.mark.parametrize(
    ("dtype", "data", "message"), [pytest.param(*case[1:], id=case[0]) for case in BAD_VALUES]
)
def test_json_values_must_fit_the_datatype(dtype: DType, data: list[Any], message: str) -> None:
    body = _req(tensor("x", codec.DATATYPES[dtype], [1, 3], data))
    with pytest.raises(InputData) as info:
        decode(identity(dtype), body)
    assert str(info.value) == f"input 'x': {message}"
    assert info.value.code == "INFER_DATA"


def test_raw_binary_needs_a_whole_number_of_rows() -> None:
    with pytest.raises(BinarySizeMismatch) as info:
        decode(identity(DType.FP32), b"\x00" * 10, "0")
    assert str(info.value) == "input 'x': expected a multiple of 12 bytes (dims [-1, 3]), got 10"


def test_raw_binary_needs_a_single_input() -> None:
    with pytest.raises(InferUnsupported) as info:
        decode(pair(), b"\x00" * 12, "0")
    assert str(info.value) == (
        "a raw binary request (Inference-Header-Content-Length: 0) needs a model with exactly "
        "one input, got 2"
    )


def test_unknown_content_encoding_is_refused() -> None:
    with pytest.raises(InferUnsupported) as info:
        inference.infer(pair(), b"{}", {"Content-Encoding": "br"})
    assert str(info.value) == "Content-Encoding: expected 'gzip', 'deflate' or 'identity', got 'br'"


def test_every_error_has_its_own_code() -> None:
    classes = {case[3] for case in BAD} | {case[2] for case in BAD_BINARY} | {InferBodyTooLarge}
    codes = [cls.code for cls in classes]
    assert len(codes) == len(set(codes)) == 16
    # V2-only conditions are INFER_*; a condition the Scope or the body cap also checks has
    # their code.
    shared = {code for code in codes if not code.startswith("INFER_")}
    assert shared == {
        "INPUT_MISSING",
        "INPUT_UNEXPECTED",
        "INPUT_DTYPE",
        "INPUT_RANK",
        "INPUT_SHAPE",
        "PAYLOAD_TOO_LARGE",
    }


@pytest.mark.parametrize(
    ("codec_error", "scope_error"),
    [
        (InputMissing, MissingInput),
        (InputUnknown, UnexpectedInput),
        (InputDatatype, WrongDType),
        (InputRank, WrongRank),
        (InputShape, WrongShape),
    ],
)
def test_a_condition_the_scope_also_checks_has_the_scope_code(
    codec_error: type[ServiceError], scope_error: type[ExecutionError]
) -> None:
    assert issubclass(codec_error, scope_error)
    assert codec_error.code == scope_error.code


def test_the_codec_and_the_scope_refuse_a_missing_input_with_one_code() -> None:
    model = pair()
    request = _req(_x())
    with pytest.raises(ServiceError) as by_codec:
        decode(model, request, None)
    with pytest.raises(MissingInput) as by_scope:
        model.compiled.run({"x": np.zeros((1, 3), np.float32)})
    assert by_codec.value.code == by_scope.value.code == "INPUT_MISSING"
