"""The fast reading of large JSON tensors (server/v2/json_tensors.py) against the reference, on
documents hypothesis writes: numbers from JSON's grammar and just outside it (exponents, -0,
huge and tiny numbers, leading zeros, signs, lone points), whitespace, nested and uneven arrays,
every datatype.

Two oracles: the codec's reference reading (`decode_request(cut_tensors=False)`: the same
arrays bit for bit, or the same error code and message), and, for every document the codec
decodes, `json.loads`' own numbers converted by numpy to the input's datatype."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_proto.types import DType
from server.errors import ServiceError
from server.v2 import codec, json_tensors
from server.v2.codec import DATATYPES, InferRequest
from validator import TensorSpec

EXAMPLES: Final = int(os.environ.get("GRAPHGATE_FUZZ_EXAMPLES", "250"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize="GRAPHGATE_FUZZ_EXAMPLES" not in os.environ,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
OUTPUTS: Final = (TensorSpec("y", DType.FP32, (-1,)),)
FLOATS: Final = (DType.FP32, DType.FP64, DType.FP16, DType.BF16)
INTEGERS: Final = (DType.INT64, DType.INT32, DType.INT8, DType.UINT8)
# Rows of COLUMNS numbers: a document past the fast reading's 16 KiB floor (checked below).
ROWS: Final = 6
COLUMNS: Final = 1024

# -- numbers -------------------------------------------------------------------------------


def _digits(least: int, most: int) -> st.SearchStrategy[str]:
    return st.text("0123456789", min_size=least, max_size=most)


# JSON's number grammar proper.
VALID_NUMBER = st.builds(
    lambda sign, whole, fraction, exponent: sign + whole + fraction + exponent,
    st.sampled_from(["", "-"]),
    st.one_of(st.just("0"), st.builds(str.__add__, st.sampled_from("123456789"), _digits(0, 22))),
    st.one_of(st.just(""), st.builds(str.__add__, st.just("."), _digits(1, 22))),
    st.one_of(
        st.just(""),
        st.builds(
            lambda e, sign, digits: e + sign + digits,
            st.sampled_from("eE"),
            st.sampled_from(["", "+", "-"]),
            _digits(1, 3),
        ),
    ),
)
# The same, each part also drawn just outside it: "+1", "01", "", "1.", "1e".
NUMBER = st.builds(
    lambda sign, whole, fraction, exponent: sign + whole + fraction + exponent,
    st.sampled_from(["", "", "", "-", "-", "+"]),
    st.one_of(
        st.just("0"),
        st.builds(str.__add__, st.sampled_from("123456789"), _digits(0, 24)),
        st.builds(str.__add__, st.just("0"), _digits(1, 3)),
        st.just(""),
    ),
    st.one_of(st.just(""), st.builds(str.__add__, st.just("."), _digits(0, 20))),
    st.one_of(
        st.just(""),
        st.builds(
            lambda e, sign, digits: e + sign + digits,
            st.sampled_from("eE"),
            st.sampled_from(["", "+", "-"]),
            _digits(0, 4),
        ),
    ),
)
# Numbers at the edges: signed zeros, subnormals, the largest and just past them, integers
# around 2**53, 2**63 and 2**64, long digit strings, FP16's and FP32's limits.
EDGES = st.sampled_from(
    [
        "-0", "-0.0", "-0.000", "0e0", "-0e-0", "-0E+7", "1E+5", "1e-400", "5e-324",
        "2.4703282292062327e-324", "2.2250738585072011e-308", "1.7976931348623157e308",
        "0.1000000000000000055511151231257827021181583404541015625", "9007199254740993",
        "9223372036854775807", "9223372036854775808", "-9223372036854775808",
        "-9223372036854775809", "18446744073709551615", "18446744073709551616", "1" * 70,
        "0." + "1" * 70, "1" * 30 + "e-30", "65504", "65519.99", "65520", "3.4028235e38",
        "3.4028236e38", "2147483648", "-129", "256", "255", "1e400", "-1e400",
        "1.7976931348623159e308",
    ]
)  # fmt: skip
# Not JSON numbers, or not numbers at all.
NOT_NUMBERS = st.sampled_from(
    ["NaN", "Infinity", "-Infinity", "true", "false", "null", '"1"', "{}", "[]", "[1]", ""]
)
STYLES: Final = ("float32", "short", "exp", "ints")
SEPARATORS = st.sampled_from([",", ", ", " ,", ",\n  ", "\t,\r\n", ", "])


def _filler(count: int, seed: int, style: str) -> list[str]:
    """`count` numbers as clients write them."""
    rng = np.random.default_rng(seed)
    if style == "ints":
        return [str(v) for v in rng.integers(0, 128, count)]  # within every integer type
    values = rng.standard_normal(count) * 10.0 ** rng.integers(-6, 4, count)  # and FP16
    if style == "float32":
        return [repr(v) for v in values.astype(np.float32).tolist()]
    if style == "short":
        return [f"{v:.7g}" for v in values.tolist()]
    return [f"{v:.4e}" for v in values.tolist()]


@st.composite
def documents(draw: st.DrawFn) -> tuple[bytes, TensorSpec, bool]:
    """A request for one input of a drawn datatype: the body, the input's spec, and whether
    every number in it was drawn from JSON's grammar proper (the json.loads oracle's cases)."""
    dtype = draw(st.sampled_from([*FLOATS, *INTEGERS, DType.BOOL]))
    rows = draw(st.integers(ROWS, ROWS + 2))
    style = draw(st.sampled_from(["ints"] * 3 + ["exp"] if dtype in INTEGERS else STYLES))
    texts = _filler(rows * COLUMNS, draw(st.integers(0, 2**32 - 1)), style)
    specials = draw(
        st.lists(
            st.one_of(VALID_NUMBER, VALID_NUMBER, EDGES, EDGES, NUMBER, NOT_NUMBERS), max_size=6
        )
    )
    for text in specials:
        texts[draw(st.integers(0, len(texts) - 1))] = text
    layout = draw(st.sampled_from(["flat"] * 3 + ["nested"] * 2 + ["uneven"]))
    uneven_row = draw(st.integers(0, rows - 1)) if layout == "uneven" else None
    body = _body(
        dtype,
        [rows, COLUMNS + draw(st.sampled_from([0] * 7 + [1]))],
        texts,
        draw(SEPARATORS),
        draw(st.sampled_from(["", " ", "\n"])),
        layout != "flat",
        uneven_row,
    )
    spec = TensorSpec("x", dtype, (-1, COLUMNS))
    return body, spec, all(_in_grammar(text) for text in specials)


def _body(
    dtype: DType,
    shape: list[int],
    texts: list[str],
    separator: str,
    pad: str,
    nested: bool,
    uneven_row: int | None,
) -> bytes:
    """The request: `texts` as the data, flat or nested in rows of COLUMNS (one row a number
    short: `uneven_row`)."""
    if not nested:
        data = "[" + pad + separator.join(texts) + pad + "]"
    else:
        lines = [texts[i : i + COLUMNS] for i in range(0, len(texts), COLUMNS)]
        if uneven_row is not None:
            lines[uneven_row].pop()
        data = "[" + separator.join("[" + pad + separator.join(line) + "]" for line in lines) + "]"
    head = json.dumps({"name": "x", "datatype": DATATYPES[dtype], "shape": shape})
    return ('{"inputs": [' + head[:-1] + ', "data": ' + data + "}]}").encode()


def _in_grammar(text: str) -> bool:
    """Whether `text` is a JSON number (json.loads reads it, and it is not a constant)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, int | float) and not isinstance(value, bool) and "n" not in text


# -- the property --------------------------------------------------------------------------


def _decoded(body: bytes, spec: TensorSpec, cut_tensors: bool) -> object:
    """The input's array, or the (code, message) of the refusal."""
    try:
        request = codec.decode_request(body, None, (spec,), OUTPUTS, cut_tensors=cut_tensors)
    except ServiceError as e:
        return e.code, str(e)
    return request


def _as_json_loads_reads(body: bytes, spec: TensorSpec) -> np.ndarray:
    """The data's numbers as json.loads reads them, converted by numpy to the input's type."""
    data: Any = json.loads(body)["inputs"][0]["data"]
    if spec.dtype in FLOATS:
        wide = np.asarray(data, np.float64)
        if spec.dtype == DType.BF16:
            return (wide.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return wide.astype(spec.dtype.numpy)
    return np.asarray(data, np.int64).astype(spec.dtype.numpy)


@FUZZ
@given(documents(), st.booleans())
def test_the_fast_reading_agrees_with_the_reference_and_json_loads(
    document: tuple[bytes, TensorSpec, bool], as_if_large: bool
) -> None:
    body, spec, in_grammar = document
    # A refusal of the fast reading stands for documents over REPARSE_MAX_BYTES (1 MiB); below
    # it the reference reads the document again and words the refusal. `as_if_large`: these
    # small documents are treated as large ones, so that the fast reading's own refusals are
    # compared too (the reference reading under the same rule).
    with mock.patch.object(
        codec, "REPARSE_MAX_BYTES", 0 if as_if_large else codec.REPARSE_MAX_BYTES
    ):
        fast = _decoded(body, spec, cut_tensors=True)
        reference = _decoded(body, spec, cut_tensors=False)
    if not isinstance(reference, InferRequest):
        assert fast == reference
        return
    assert isinstance(fast, InferRequest), fast
    got, want = fast.feeds["x"], reference.feeds["x"]
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert got.tobytes() == want.tobytes()  # bit for bit: -0.0, NaN, subnormals
    if in_grammar and spec.dtype != DType.BOOL:
        expected = _as_json_loads_reads(body, spec).reshape(got.shape)
        assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_the_generated_documents_reach_the_fast_reading(style: str, nested: bool) -> None:
    # The property is only worth something if its documents are ones the fast reading takes
    # (16 KiB at least, a data array of numbers only): the smallest it writes of each kind.
    texts = _filler(ROWS * COLUMNS, 0, style)
    body = _body(DType.INT8, [ROWS, COLUMNS], texts, ",", "", nested, None)
    assert len(body) >= json_tensors.MIN_DOCUMENT_BYTES
    assert len(json_tensors.cut(body).arrays) == 1


def test_the_arrays_are_parsed_by_simdjson() -> None:
    # Without pysimdjson (a dependency) the fast reading falls back to orjson's, correct but
    # slower, and the property above would not exercise simdjson's reading at all.
    assert json_tensors.simdjson is not None, "pysimdjson is missing: pip install -e ."


def test_threads_decoding_at_once_each_get_their_own_numbers() -> None:
    # Parsers are kept and handed from thread to thread (json_tensors._take_parser): requests
    # decoded at once, each with its own numbers, must each get theirs.
    spec = TensorSpec("x", DType.FP64, (-1, COLUMNS))
    bodies = [
        _body(DType.FP64, [ROWS, COLUMNS], _filler(ROWS * COLUMNS, seed, "float32"), ", ", "",
              False, None)
        for seed in range(8)
    ]  # fmt: skip
    wanted = [_as_json_loads_reads(body, spec).reshape(ROWS, COLUMNS) for body in bodies]
    with ThreadPoolExecutor(8) as threads:
        for _ in range(5):
            got = list(threads.map(lambda body: _decoded(body, spec, cut_tensors=True), bodies))
            for request, want in zip(got, wanted, strict=True):
                assert isinstance(request, InferRequest), request
                assert request.feeds["x"].tobytes() == want.tobytes()
