"""Large JSON tensors read apart (server/v2/json_tensors.py) decode exactly as the codec's
reference reading does: on a seeded fuzzed set of documents, the same arrays, or the same
error and message. And the JSON writer gives the numbers Python's json gives."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from graph_proto.types import DType
from server.dispatch.answer import AnswerSpec, Budget, BufferSink, OutputSpec, encode, number_text
from server.errors import ServiceError
from server.v2 import codec, json_tensors
from server.v2.codec import DATATYPES, InferRequest
from validator import TensorSpec

IMAGE = TensorSpec("x", DType.FP32, (-1, 3, 32, 32))
MASK = TensorSpec("mask", DType.BOOL, (-1,))
OUTPUTS = (TensorSpec("y", DType.FP32, (-1,)), TensorSpec("m", DType.BOOL, (-1,)))
# Every numeric datatype, each with values it holds: a 2 x 1024 input of each.
NUMERIC: dict[DType, Callable[[np.random.Generator], np.ndarray]] = {
    DType.FP32: lambda rng: rng.standard_normal(2048).astype(np.float32),
    DType.FP64: lambda rng: rng.standard_normal(2048) * 10.0 ** rng.integers(-30, 30, 2048),
    DType.FP16: lambda rng: rng.standard_normal(2048).astype(np.float16),
    DType.BF16: lambda rng: rng.standard_normal(2048).astype(np.float32),
    DType.INT64: lambda rng: rng.integers(-(2**62), 2**62, 2048),
    DType.INT32: lambda rng: rng.integers(-(2**31), 2**31, 2048),
    DType.INT8: lambda rng: rng.integers(-128, 128, 2048),
    DType.UINT8: lambda rng: rng.integers(0, 256, 2048),
}


def decode_both(
    body: bytes, header_length: str | None, inputs: tuple[TensorSpec, ...]
) -> tuple[object, object]:
    """What decode_request answers, with and without the JSON tensors read apart: an
    InferRequest, or the (error class, message) it raised."""

    def answer(cut_tensors: bool) -> object:
        try:
            return codec.decode_request(
                body, header_length, inputs, OUTPUTS, cut_tensors=cut_tensors
            )
        except ServiceError as e:
            return type(e), str(e)

    return answer(True), answer(False)


def assert_same(fast: object, reference: object) -> None:
    if not isinstance(reference, InferRequest):
        assert fast == reference
        return
    assert isinstance(fast, InferRequest), fast
    assert (fast.id, fast.outputs, fast.timeout_us) == (
        reference.id,
        reference.outputs,
        reference.timeout_us,
    )
    assert list(fast.feeds) == list(reference.feeds)
    for name, want in reference.feeds.items():
        got = fast.feeds[name]
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        np.testing.assert_array_equal(got, want)  # NaN equals NaN here


# -- the fuzzed documents ------------------------------------------------------------------


def _numbers(n: int, rng: random.Random) -> list[str]:
    """The text of `n` numbers in one of the ways clients write them, or with oddities."""
    style = rng.choice(["repr", "short", "ints", "exp", "mixed", "odd"])
    values = [rng.gauss(0, 1) for _ in range(n)]
    if style == "repr":
        return [repr(v) for v in values]
    if style == "short":
        return [f"{v:.7g}" for v in values]
    if style == "ints":
        return [str(rng.randint(-300, 300)) for _ in range(n)]
    if style == "exp":
        return [f"{v:.3e}".replace("e", rng.choice("eE")) for v in values]
    odd = [
        "-0", "-0.0", "1E+5", "1e-7", "9223372036854775807", "9223372036854775808",
        "18446744073709551615", "18446744073709551616", "-9223372036854775809", "1e400",
        "1" * 70, "0." + "1" * 70, "65504.0", "65520.0", "3.5e38", "1e-50", "5e-324",
        "2147483648", "-129", "256", "0", "1",
    ]  # fmt: skip
    texts = [repr(v) if rng.random() < 0.5 else str(rng.randint(-9, 9)) for v in values]
    if style == "odd":
        for _ in range(rng.randint(1, 4)):
            texts[rng.randrange(n)] = rng.choice(odd)
    return texts


def _nest(texts: list[str], shape: list[int], rng: random.Random) -> str:
    """`texts` as a JSON array, flat or nested as `shape`, with the spacing clients use."""
    comma = rng.choice([",", ", ", ",\n", " , ", ",\t"])
    return _nested(texts, shape if rng.random() < 0.5 else [len(texts)], comma)


def _nested(texts: list[str], shape: list[int], comma: str) -> str:
    if len(shape) == 1:
        return "[" + comma.join(texts) + "]"
    inner = math.prod(shape[1:])
    rows = [_nested(texts[i : i + inner], shape[1:], comma) for i in range(0, len(texts), inner)]
    return "[" + comma.join(rows) + "]"


def _input(name: str, datatype: str, shape: list[int], data: str, **extra: Any) -> str:
    head = json.dumps({"name": name, "datatype": datatype, "shape": shape, **extra})
    return head[:-1] + f', "data": {data}}}'


def _document(rng: random.Random) -> str:
    """A request for IMAGE and MASK, x FP32 [k, 3, 32, 32] with k 2 or 3, as JSON text."""
    shape = [rng.randint(2, 3), 3, 32, 32]
    texts = _numbers(math.prod(shape), rng)
    x = _input("x", rng.choice(["FP32"] * 9 + ["FP64"]), shape, _nest(texts, shape, rng))
    mask = _input("mask", "BOOL", [2], "[true, false]")
    inputs = [x, mask] if rng.random() < 0.8 else [mask, x]
    fields = [f'"inputs": [{", ".join(inputs)}]']
    if rng.random() < 0.3:
        fields.append(f'"id": {json.dumps(rng.choice(["r-1", "data", "é", 7]))}')
    if rng.random() < 0.3:
        fields.append('"parameters": {"binary_data_output": true, "timeout": 1000}')
    if rng.random() < 0.3:
        fields.append(
            '"outputs": [{"name": "m"}, {"name": "y", "parameters": {"binary_data": false}}]'
        )
    rng.shuffle(fields)
    return "{" + ", ".join(fields) + "}"


# Changes to a valid document: each makes one thing the reading must agree on.
MUTATIONS: list[Callable[[str, random.Random], str]] = [
    lambda doc, rng: doc,
    lambda doc, rng: doc,
    lambda doc, rng: (
        doc.replace("0.", "true", 1) if rng.random() < 0.5 else doc.replace("1", "null", 1)
    ),
    lambda doc, rng: doc.replace(", ", ', "s", ', 1 + rng.randrange(40)),
    lambda doc, rng: doc.replace(", ", ", {}, ", 1),
    lambda doc, rng: (
        doc.replace(", 0", ", NaN, 0", 1) if "NaN" not in doc else doc.replace("1", "Infinity", 1)
    ),
    lambda doc, rng: doc.replace("1", "-Infinity", 1),
    lambda doc, rng: doc.replace("5", ".5", 1),
    lambda doc, rng: doc.replace(", 1", ", 01", 1),
    lambda doc, rng: doc.replace(", 1", ", +1", 1),
    lambda doc, rng: doc.replace("5,", "5.,", 1),
    lambda doc, rng: doc.replace("2,", "2e,", 1),
    lambda doc, rng: doc.replace("3,", "3 4,", 1),
    lambda doc, rng: doc.replace(",", ",,", 1 + rng.randrange(50)),
    lambda doc, rng: doc.replace("]", "]]", 1),
    lambda doc, rng: doc.replace("]", "", 1),
    lambda doc, rng: doc.replace("[", "[[", 2),
    lambda doc, rng: doc.replace("], [", ", ", 1),
    lambda doc, rng: doc.replace('"data"', '"d\\u0061ta"', 1),
    lambda doc, rng: doc.replace('"data": [', '"data": [1], "data": [', 1),
    lambda doc, rng: doc.replace('"inputs": [', '"data": [1, 2, 3], "inputs": [', 1),
    lambda doc, rng: doc.replace('"name": "x"', '"name": "x", "parameters": {"data": [1, 2]}', 1),
    lambda doc, rng: doc.replace('"name": "x"', '"name": "x\\"data\\": [1"', 1),
    lambda doc, rng: doc.replace('"name": "x"', '"name": "x\\\\"', 1),
    lambda doc, rng: doc.replace('"FP32"', '"INT64"', 1),
    lambda doc, rng: doc.replace('"shape": [', '"shape": [2, ', 1),
    lambda doc, rng: doc.replace("32]", "33]", 1),
    lambda doc, rng: doc[: rng.randrange(len(doc))],
    lambda doc, rng: doc + rng.choice(["}", " ", "x", "[1]"]),
    lambda doc, rng: doc.replace("{", '{"z": ' + "[" * 70 + "]" * 70 + ", ", 1),
    lambda doc, rng: doc.replace('"data": ', '"data": ' + "[" * 40, 1) + "]" * 40,
    lambda doc, rng: _flip(doc, rng),
    lambda doc, rng: _flip(_flip(_flip(doc, rng), rng), rng),
]


def _flip(doc: str, rng: random.Random) -> str:
    i = rng.randrange(len(doc))
    return doc[:i] + rng.choice(list('[]{},:"\\ -+.eE0tfn\x00é')) + doc[i + 1 :]


def test_reading_apart_agrees_with_the_reference_on_fuzzed_documents() -> None:
    rng = random.Random(20240611)
    outcomes = {"decoded": 0, "refused": 0, "cut": 0}
    for case in range(600):
        doc = _document(rng)
        mutated = rng.choice(MUTATIONS)(doc, rng).encode("utf-8", "surrogatepass")
        fast, reference = decode_both(mutated, None, (IMAGE, MASK))
        try:
            assert_same(fast, reference)
        except AssertionError as e:
            raise AssertionError(f"case {case}: {mutated[:300]!r}...: {e}") from None
        outcomes["decoded" if isinstance(reference, InferRequest) else "refused"] += 1
        outcomes["cut"] += _is_cut(mutated) and isinstance(reference, InferRequest)
    # The fuzzing is only worth something if both kinds of answer are common, and most
    # successful decodes went through the reading apart.
    assert outcomes["decoded"] > 100 and outcomes["refused"] > 150, outcomes
    assert outcomes["cut"] > 0.6 * outcomes["decoded"], outcomes


def _is_cut(body: bytes) -> bool:
    try:
        cut = json_tensors.cut(body)
        json_tensors.put_back(json.loads(cut.skeleton), cut.arrays)
    except (json_tensors.NotCut, ValueError):
        return False
    return True


@pytest.mark.parametrize("dtype", list(NUMERIC), ids=[d.name for d in NUMERIC])
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_every_numeric_datatype_reads_alike(dtype: DType, nested: bool) -> None:
    rng = np.random.default_rng(7)
    spec = TensorSpec("x", dtype, (-1, 1024))
    values = NUMERIC[dtype](rng).reshape(2, 1024)
    data = values.tolist() if nested else values.reshape(-1).tolist()
    body = json.dumps(
        {
            "inputs": [
                {"name": "x", "datatype": codec.DATATYPES[dtype], "shape": [2, 1024], "data": data}
            ]
        }
    ).encode()
    assert _is_cut(body)
    fast, reference = decode_both(body, None, (spec,))
    assert isinstance(reference, InferRequest)
    assert_same(fast, reference)


def test_binary_data_after_a_large_json_tensor_reads_alike() -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    mask = np.array([True, False, True])
    doc = {
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, 3, 32, 32], "data": x.ravel().tolist()},
            {
                "name": "mask",
                "datatype": "BOOL",
                "shape": [3],
                "parameters": {"binary_data_size": 3},
            },
        ]
    }
    header = json.dumps(doc).encode()
    for extra in (b"", b"\x00"):  # the right size, and one byte too many
        fast, reference = decode_both(
            header + mask.tobytes() + extra, str(len(header)), (IMAGE, MASK)
        )
        assert_same(fast, reference)
    assert isinstance(reference, tuple) and reference[0].code == "INFER_BINARY_SIZE"


def test_data_nested_in_many_small_arrays_stays_with_the_reference() -> None:
    # [4096 + 1, 2] nested: finding its end costs more Python steps than orjson's reading.
    spec = TensorSpec("x", DType.FP32, (-1, 2))
    values = np.arange(2 * 4097, dtype=np.float32).reshape(4097, 2) / 7
    body = json.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4097, 2], "data": values.tolist()}]}
    ).encode()
    assert not _is_cut(body)
    fast, reference = decode_both(body, None, (spec,))
    assert isinstance(reference, InferRequest)
    assert_same(fast, reference)


def test_a_document_of_many_strings_goes_to_the_reference_whole() -> None:
    # Walking 20,000 strings in Python would cost more than orjson's reading of them.
    x = np.random.default_rng(4).standard_normal((2, 3, 32, 32)).astype(np.float32)
    doc = {
        "parameters": {"tags": ["t"] * 20_000},
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, 3, 32, 32], "data": x.ravel().tolist()},
            {"name": "mask", "datatype": "BOOL", "shape": [1], "data": [True]},
        ],
    }
    body = json.dumps(doc).encode()
    with pytest.raises(json_tensors.NotCut):
        json_tensors.cut(body)
    fast, reference = decode_both(body, None, (IMAGE, MASK))
    assert isinstance(reference, InferRequest)
    assert_same(fast, reference)


def test_a_cut_array_keeps_the_document_within_the_depth_limit() -> None:
    assert 3 + json_tensors.MAX_NESTING < codec.MAX_JSON_DEPTH


# -- writing -------------------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1e-7, 1e-5, 1e16, 1.5e300, 5e-324, 2.2250738585072014e-308, 1 / 3]


@pytest.mark.parametrize(
    "dtype", [*NUMERIC, DType.BOOL], ids=[d.name for d in [*NUMERIC, DType.BOOL]]
)
def test_written_data_reads_back_as_json_dumps_writes_it(dtype: DType) -> None:
    rng = np.random.default_rng(11)
    if dtype == DType.BOOL:
        value = rng.random(500) < 0.5
    elif dtype == DType.BF16:  # the upper halves of float32s, as a BF16 output holds them
        value = (rng.standard_normal(500).astype(np.float32).view(np.uint32) >> 16).astype(
            np.uint16
        )
    else:
        value = NUMERIC[dtype](rng)[:500].astype(dtype.numpy)
    if dtype in (DType.FP32, DType.FP64, DType.FP16):
        with np.errstate(over="ignore"):
            special = np.asarray(SPECIAL).astype(dtype.numpy)
        value = np.concatenate([value, special[np.isfinite(special)]])
    value = value.reshape(-1, 1) if value.size % 2 else value.reshape(2, -1)
    written = _written_data(dtype, value)
    as_before = json.loads(json.dumps(_as_python(dtype, value)))
    assert _bits(written) == _bits(as_before)


@pytest.mark.parametrize("special", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_written_as_json_dumps_writes_them(special: float) -> None:
    value = np.array([[1.5, special], [-0.0, 2.0]], np.float32)
    text = number_text(value.reshape(-1))
    assert f"[{text}]" == json.dumps(_as_python(DType.FP32, value), separators=(",", ":"))


def _encoded(outputs: Sequence[OutputSpec], values: dict[str, np.ndarray]) -> tuple[bytes, int]:
    """The answer the worker writes (server/dispatch/answer.py), and its JSON header's length."""
    sink = BufferSink()
    length, header = encode(
        AnswerSpec("net", "2", "req-é", tuple(outputs), Budget()), values, sink, lambda: None
    )
    return bytes(sink.buffer), length if header is None else header


def _written_data(dtype: DType, value: np.ndarray) -> Any:
    """The `data` of `value` in a JSON answer, read back."""
    wire = value.dtype.str
    body, _length = _encoded(
        [OutputSpec("y", DATATYPES[dtype], wire, False, dtype == DType.BF16)], {"y": value}
    )
    return json.loads(body)["outputs"][0]["data"]


def test_a_response_with_json_and_binary_outputs_reads_back_whole() -> None:
    y = np.random.default_rng(5).standard_normal((2, 300)).astype(np.float32)
    m = np.array([True, False])
    outputs = [OutputSpec("y", "FP32", "<f4", False), OutputSpec("m", "BOOL", "|b1", True)]
    body, length = _encoded(outputs, {"y": y, "m": m})
    doc = json.loads(body[:length])
    assert doc["model_name"] == "net" and doc["model_version"] == "2" and doc["id"] == "req-é"
    assert [o["name"] for o in doc["outputs"]] == ["y", "m"]
    np.testing.assert_array_equal(
        np.array(doc["outputs"][0]["data"], np.float32).reshape(2, 300), y
    )
    assert doc["outputs"][1]["parameters"] == {"binary_data_size": 2}
    assert body[length:] == m.tobytes()


def _as_python(dtype: DType, value: np.ndarray) -> list[Any]:
    """A tensor's data as the codec wrote it before: numpy's Python numbers, one by one."""
    flat = value.reshape(-1)
    if dtype == DType.BF16:
        flat = (flat.astype(np.uint32) << 16).view(np.float32)
    data: list[Any] = flat.tolist()
    return data


def _bits(values: list[Any]) -> list[Any]:
    """Numbers as exact bit patterns (floats) or themselves (integers, booleans)."""
    return [v.hex() if isinstance(v, float) else (type(v), v) for v in values]
