"""V2 inference requests in and responses out: JSON and the binary tensor extension.

Requests are decoded into numpy feeds checked against the model's signature (names, datatypes,
shapes, element counts, binary sizes) before anything is allocated from the caller's numbers;
responses are encoded by the worker that ran the request (server/dispatch/answer.py), as JSON
or as a JSON header followed by raw tensor bytes.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson

from graph_proto.types import DType
from server.v2 import json_tensors
from server.v2.errors import (
    BinarySizeMismatch,
    InferBodyTooLarge,
    InferHeaderLength,
    InferMalformed,
    InferRequestInvalid,
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
from validator import TensorSpec

DATATYPES: Final[Mapping[DType, str]] = {
    DType.BOOL: "BOOL",
    DType.UINT8: "UINT8",
    DType.INT8: "INT8",
    DType.INT16: "INT16",
    DType.INT32: "INT32",
    DType.INT64: "INT64",
    DType.FP16: "FP16",
    DType.FP32: "FP32",
    DType.FP64: "FP64",
    DType.BF16: "BF16",  # binary: the upper 2 bytes of a float32; JSON: numbers
}
HEADER_LENGTH: Final = "inference-header-content-length"
# Responses: JSON, or a JSON header and raw tensor bytes (written by the worker that ran the
# request: server/dispatch/answer.py).
JSON_CONTENT: Final = "application/json"
BINARY_CONTENT: Final = "application/octet-stream"
_INTEGERS: Final = frozenset({DType.UINT8, DType.INT8, DType.INT16, DType.INT32, DType.INT64})
_ENCODINGS: Final = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# NOTE: larger dims can only come with zero elements, and would overflow numpy or onnxruntime.
_MAX_DIM: Final = 2**31 - 1
# Requests orjson refused are parsed again by the standard library up to this size (see
# decode_request); a larger one only when orjson could not parse it at all.
REPARSE_MAX_BYTES: Final = 1024 * 1024
# The longest JSON number read: a float64 needs at most 24 characters, an int64 20; the rest is
# room for zeros and exponents a client may write.
MAX_NUMBER_CHARS: Final = 64
# How deep the request's JSON may nest: the document, `inputs`, an input, and its `data` nested
# as its shape (numpy takes at most 64 dims): 4 + 64, with some margin.
MAX_JSON_DEPTH: Final = 72


class _Unparsed(InferMalformed):
    """orjson could not parse the document (the standard library may: NaN, huge numbers)."""


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    spec: TensorSpec
    binary: bool  # raw bytes after the JSON header, else JSON `data`


@dataclass(frozen=True, slots=True)
class InferRequest:
    id: str | None
    feeds: dict[str, np.ndarray]
    outputs: tuple[RequestedOutput, ...]
    timeout_us: int | None = None  # request parameter `timeout` (Triton: microseconds)


def tensor_metadata(spec: TensorSpec) -> dict[str, Any]:
    """A signature entry as V2 model metadata writes it: -1 for a variable dim."""
    return {"name": spec.name, "datatype": DATATYPES[spec.dtype], "shape": list(spec.dims)}


def decompress(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """Undoes `Content-Encoding: gzip|deflate`, never inflating past `max_bytes`."""
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return body
    if name not in _ENCODINGS:
        raise InferUnsupported(
            f"Content-Encoding: expected 'gzip', 'deflate' or 'identity', got {encoding!r}"
        )
    inflater = zlib.decompressobj(_ENCODINGS[name])
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as e:
        raise InferMalformed(f"Content-Encoding {name}: expected {name} data, got: {e}") from None
    if len(out) > max_bytes:
        raise InferBodyTooLarge(f"decompressed request body exceeds the {max_bytes}-byte limit")
    if not inflater.eof:
        raise InferMalformed(f"Content-Encoding {name}: expected a complete stream, got a cut one")
    return out


def decode_request(
    body: bytes,
    header_length: str | None,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    *,
    cut_tensors: bool = True,
) -> InferRequest:
    """Parses and checks a request; `header_length` is the Inference-Header-Content-Length.

    `cut_tensors=False`: the reference reading alone, which a request with large JSON tensors
    otherwise meets only when the faster reading does not take it (tests and benchmarks
    compare the two)."""
    if cut_tensors and len(body) >= json_tensors.MIN_DOCUMENT_BYTES:
        try:
            return _decode_cut(body, header_length, inputs, outputs)
        except json_tensors.NotCut:
            pass  # the reference reading below decodes it
        except InferRequestInvalid:
            # As below: a large document is refused once, never read a second time (a 60 MiB
            # body sent over and over would cost twice its parse); a small one is read again,
            # and the reference reading words its refusal.
            if len(body) > REPARSE_MAX_BYTES:
                raise
    try:
        return _decode_request(body, header_length, inputs, outputs, orjson.loads)
    except InferRequestInvalid as refused:
        # NOTE: orjson parses big tensors about 3x faster than json.loads but reads a few things
        # differently (NaN and Infinity refused, integers past 64 bits read as floats). The
        # standard library's reading is the reference: a refused request is decoded again
        # with it, and its answer (success or error) is the one given. Only a small one, or
        # one orjson could not parse: a large document orjson read is refused by either
        # reading, so it is not parsed twice (its message may name a float for a huge integer).
        if len(body) > REPARSE_MAX_BYTES and not isinstance(refused, _Unparsed):
            raise
        return _decode_request(body, header_length, inputs, outputs, _standard_loads)


def decode_document(
    doc: dict[str, Any],
    binary: bytes | memoryview,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
) -> InferRequest:
    """Checks a request already read into its document (the JSON header's object, built by
    server/grpc/translate.py from a protobuf message) with `binary` (the inputs' bytes, in
    order): the same checks and codes as `decode_request`, without writing and parsing JSON.
    The document's inputs carry `binary_data_size`, never JSON `data`."""
    return _decode_document(doc, b"", memoryview(binary), inputs, outputs)


def _standard_loads(raw: bytes) -> Any:
    """json.loads with numbers capped in length before they are converted (Python refuses
    integers over 4,300 digits with a ValueError, and converts long ones in quadratic time)."""
    return json.loads(raw, parse_int=_bounded(int), parse_float=_bounded(float))


def _bounded(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise InferMalformed(
                f"expected JSON numbers of at most {MAX_NUMBER_CHARS} characters, "
                f"got one of {len(text)}"
            )
        return convert(text)

    return parse


def _decode_request(
    body: bytes,
    header_length: str | None,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    loads: Callable[[bytes], Any],
) -> InferRequest:
    split = _split(header_length, len(body))
    if split == 0:
        return _raw_binary(body, inputs, outputs)
    json_part = body if split is None else body[:split]
    doc = _parse_json(json_part, loads)
    return _decode_document(doc, json_part, memoryview(body)[len(json_part) :], inputs, outputs)


def _decode_cut(
    body: bytes,
    header_length: str | None,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
) -> InferRequest:
    """The request with its large JSON tensors read straight into arrays (server/v2/
    json_tensors.py); NotCut or a refusal sends it to the reference reading."""
    split = _split(header_length, len(body))
    json_part = body if split is None else body[:split]
    if len(json_part) < json_tensors.MIN_DOCUMENT_BYTES:
        raise json_tensors.NotCut  # binary data after a small header, or a raw binary body
    cut = json_tensors.cut(json_part)
    doc = _parse_json(cut.skeleton, orjson.loads)
    json_tensors.put_back(doc, cut.arrays)
    return _decode_document(doc, cut.skeleton, memoryview(body)[len(json_part) :], inputs, outputs)


def _decode_document(
    doc: dict[str, Any],
    json_part: bytes,
    binary: memoryview,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
) -> InferRequest:
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise InferMalformed(f"'id': expected a string, got {_kind(request_id)}")
    params = _parameters(doc, "request")
    binary_default = params.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise InferMalformed(
            f"request parameter 'binary_data_output': expected a boolean, got {_kind(binary_default)}"
        )
    # NOTE: numpy reads [1, true] as integers; the check for booleans among numbers walks the
    # data, so it runs only when the document has a boolean somewhere (a byte search).
    has_booleans = b"true" in json_part or b"false" in json_part
    feeds = _feeds(_list(doc, "inputs", "request"), inputs, binary, has_booleans)
    requested = _requested(doc, outputs, binary_default)
    return InferRequest(request_id, feeds, requested, _timeout_us(params))


def _timeout_us(params: Mapping[str, Any]) -> int | None:
    timeout = params.get("timeout")
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
        raise InferMalformed(
            f"request parameter 'timeout': expected a positive integer (microseconds), got "
            f"{timeout!r}"[:200]
        )
    return timeout


# -- the request document ------------------------------------------------------------------


def _split(header: str | None, size: int) -> int | None:
    if header is None:
        return None
    text = header.strip()
    if not (text.isascii() and text.isdigit()) or int(text) > size:
        raise InferHeaderLength(
            f"Inference-Header-Content-Length: expected an integer from 0 to {size} "
            f"(the body length), got {header[:40]!r}"
        )
    return int(text)


def _parse_json(raw: bytes, loads: Callable[[bytes], Any]) -> dict[str, Any]:
    if loads is orjson.loads:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise _Unparsed(f"expected a JSON inference request, got invalid JSON: {e}") from None
    else:
        doc = _loads_standard(raw, loads)
    if not isinstance(doc, dict):
        raise InferMalformed(f"expected a JSON object as the request, got {_kind(doc)}")
    # A document cannot nest deeper than it has brackets: counting them (in C) spares the
    # walk on the usual request, a few brackets around its tensors' descriptions.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _depth(doc) > MAX_JSON_DEPTH:
        raise InferMalformed(
            f"expected JSON nested at most {MAX_JSON_DEPTH} levels deep, got deeper"
        )
    return doc


def _loads_standard(raw: bytes, loads: Callable[[bytes], Any]) -> Any:
    try:
        return loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InferMalformed(f"expected a JSON inference request, got invalid JSON: {e}") from None
    except RecursionError:
        raise InferMalformed(
            "expected a JSON inference request, got JSON nested too deeply"
        ) from None


def _depth(doc: dict[str, Any]) -> int:
    """How deep the document nests, following every value of objects and the first element of
    arrays: tensor data nests uniformly (numpy refuses it as uneven otherwise, and past 64
    dims), and a walk of every element would cost the hot path a pass over the data."""
    deepest = 1
    stack: list[tuple[object, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list) and value:
            stack.append((value[0], depth + 1))
    return deepest


def _kind(value: object) -> str:
    """A JSON value's kind as messages name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return "an array" if isinstance(value, list) else "an object"


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InferMalformed(f"{where}: expected an object, got {_kind(value)}")
    return value


def _list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if not isinstance(value, list):
        got = "nothing" if value is None and key not in obj else _kind(value)
        raise InferMalformed(f"{where} {key!r}: expected an array, got {got}")
    return value


def _string(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        got = "nothing" if key not in obj else _kind(value)
        raise InferMalformed(f"{where} {key!r}: expected a string, got {got}")
    return value


def _parameters(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    params = obj.get("parameters", {})
    if not isinstance(params, dict):
        raise InferMalformed(f"{where} 'parameters': expected an object, got {_kind(params)}")
    if "shared_memory_region" in params:
        raise InferUnsupported(f"{where}: shared memory is not supported; send the data inline")
    return params


def _feeds(
    items: list[Any], inputs: Sequence[TensorSpec], binary: memoryview, has_booleans: bool
) -> dict[str, np.ndarray]:
    specs = {spec.name: spec for spec in inputs}
    feeds: dict[str, np.ndarray] = {}
    offset = 0
    for i, item in enumerate(items):
        where = f"inputs[{i}]"
        obj = _object(item, where)
        name = _string(obj, "name", where)
        spec = specs.get(name)
        if spec is None:
            raise InputUnknown(
                f"input {name!r}: expected one of {list(specs)}, got an unknown name"
            )
        if name in feeds:
            raise InputDuplicate(f"input {name!r}: expected once, got twice")
        _check_datatype(obj, spec, where)
        shape = _shape(obj, spec)
        params = _parameters(obj, f"input {name!r}")
        size = params.get("binary_data_size")
        if ("data" in obj) == (size is not None):
            got = "both" if size is not None else "neither"
            raise InputDataSource(
                f"input {name!r}: expected exactly one of 'data' or "
                f"'parameters.binary_data_size', got {got}"
            )
        if size is None:
            feeds[name] = _from_json(spec, shape, obj["data"], has_booleans)
            continue
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InferMalformed(
                f"input {name!r} 'binary_data_size': expected a non-negative integer, got {_kind(size)}"
            )
        feeds[name] = _from_binary(spec, shape, size, binary, offset)
        offset += size
    if offset != len(binary):
        raise BinarySizeMismatch(
            f"binary data: expected {offset} bytes after the JSON header (the sum of the "
            f"inputs' binary_data_size), got {len(binary)}"
        )
    if missing := [spec.name for spec in inputs if spec.name not in feeds]:
        raise InputMissing(f"expected inputs {list(specs)}, got {list(feeds)}: missing {missing}")
    return feeds


def _check_datatype(obj: Mapping[str, Any], spec: TensorSpec, where: str) -> None:
    datatype = _string(obj, "datatype", where)
    want = DATATYPES[spec.dtype]
    if datatype != want:
        raise InputDatatype(f"input {spec.name!r}: expected datatype {want!r}, got {datatype!r}")


def _shape(obj: Mapping[str, Any], spec: TensorSpec) -> tuple[int, ...]:
    raw = _list(obj, "shape", f"input {spec.name!r}")
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= _MAX_DIM for d in raw):
        raise InputShape(
            f"input {spec.name!r}: expected a shape of integers from 0 to {_MAX_DIM}, "
            f"got {raw[:8]!r}"
        )
    expected = f"input {spec.name!r}: expected shape {list(spec.dims)}, got {raw[:8]}"
    if len(raw) != len(spec.dims):
        raise InputRank(expected)
    if not all(w < 0 or w == g for w, g in zip(spec.dims, raw, strict=True)):
        raise InputShape(expected)
    return tuple(raw)


def _requested(
    doc: Mapping[str, Any], outputs: Sequence[TensorSpec], binary_default: bool
) -> tuple[RequestedOutput, ...]:
    if doc.get("outputs") in (None, []):
        return tuple(RequestedOutput(spec, binary_default) for spec in outputs)
    specs = {spec.name: spec for spec in outputs}
    chosen: dict[str, RequestedOutput] = {}
    for i, item in enumerate(_list(doc, "outputs", "request")):
        obj = _object(item, f"outputs[{i}]")
        name = _string(obj, "name", f"outputs[{i}]")
        if name not in specs:
            raise OutputUnknown(
                f"requested output {name!r}: expected one of {list(specs)}, got an unknown name"
            )
        if name in chosen:
            raise OutputDuplicate(f"requested output {name!r}: expected once, got twice")
        params = _parameters(obj, f"requested output {name!r}")
        if "classification" in params:
            raise InferUnsupported(f"requested output {name!r}: classification is not supported")
        binary = params.get("binary_data", binary_default)
        if not isinstance(binary, bool):
            raise InferMalformed(
                f"requested output {name!r} 'binary_data': expected a boolean, got {_kind(binary)}"
            )
        chosen[name] = RequestedOutput(specs[name], binary)
    return tuple(chosen.values())


def _raw_binary(
    body: bytes, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
) -> InferRequest:
    """Inference-Header-Content-Length 0: the body is the one input's bytes; outputs binary."""
    if len(inputs) != 1:
        raise InferUnsupported(
            "a raw binary request (Inference-Header-Content-Length: 0) needs a model with "
            f"exactly one input, got {len(inputs)}"
        )
    spec = inputs[0]
    free = [axis for axis, d in enumerate(spec.dims) if d < 0]
    known = math.prod(d for d in spec.dims if d >= 0) * spec.dtype.itemsize
    shape = list(spec.dims)
    if len(free) > 1 or (free and known == 0):
        raise InferUnsupported(
            "a raw binary request needs an input with at most one variable dim, "
            f"got dims {list(spec.dims)}"
        )
    if free:
        if len(body) % known:
            raise BinarySizeMismatch(
                f"input {spec.name!r}: expected a multiple of {known} bytes "
                f"(dims {list(spec.dims)}), got {len(body)}"
            )
        shape[free[0]] = len(body) // known
    feed = _from_binary(spec, tuple(shape), len(body), memoryview(body), 0)
    requested = tuple(RequestedOutput(out, True) for out in outputs)
    return InferRequest(None, {spec.name: feed}, requested)


# -- tensor data ---------------------------------------------------------------------------


def _from_binary(
    spec: TensorSpec, shape: tuple[int, ...], size: int, binary: memoryview, offset: int
) -> np.ndarray:
    count = math.prod(shape)
    want = count * spec.dtype.itemsize
    if size != want:
        raise BinarySizeMismatch(
            f"input {spec.name!r}: expected binary_data_size {want} "
            f"({DATATYPES[spec.dtype]} {list(shape)}), got {size}"
        )
    if offset + size > len(binary):
        raise BinarySizeMismatch(
            f"input {spec.name!r}: expected {size} binary bytes, got {len(binary) - offset} "
            "left in the body"
        )
    if count == 0:
        return np.empty(shape, spec.dtype.numpy)
    if spec.dtype == DType.BOOL:
        raw = np.frombuffer(binary, np.uint8, count, offset)
        if (top := int(raw.max())) > 1:
            raise InputData(f"input {spec.name!r}: expected BOOL bytes 0 or 1, got {top}")
        value = raw.view(np.bool_)
    else:
        value = np.frombuffer(binary, spec.dtype.numpy, count, offset)
    # NOTE: an element straddling a word boundary is legal on the wire; onnxruntime wants aligned.
    return (value if value.flags.aligned else value.copy()).reshape(shape)


def _from_json(
    spec: TensorSpec, shape: tuple[int, ...], data: object, has_booleans: bool
) -> np.ndarray:
    count = math.prod(shape)
    try:
        value = np.asarray(data)
    except (ValueError, OverflowError):
        raise InputShape(
            f"input {spec.name!r}: expected data flat or nested as {list(shape)}, "
            "got arrays of uneven lengths"
        ) from None
    if has_booleans and value.dtype.kind in "iuf" and _holds_boolean(data):
        raise InputData(
            f"input {spec.name!r}: expected {DATATYPES[spec.dtype]} numbers, got a boolean "
            "among them (booleans are not numbers)"
        )
    if value.size != count:
        raise InputElementCount(
            f"input {spec.name!r}: expected {count} elements for shape {list(shape)}, "
            f"got {value.size}"
        )
    if value.ndim > 1 and value.shape != shape:
        raise InputShape(
            f"input {spec.name!r}: expected data flat or nested as {list(shape)}, "
            f"got it nested as {list(value.shape)}"
        )
    return _typed(spec, value).reshape(shape)


def _holds_boolean(data: object) -> bool:
    """Whether `data` (a JSON value, arrays nested) has a boolean anywhere."""
    level = [data]
    while level:
        if any(type(v) is bool for v in level):
            return True
        level = [v for item in level if isinstance(item, list) for v in item]
    return False


def _typed(spec: TensorSpec, value: np.ndarray) -> np.ndarray:
    """JSON numbers as the input's dtype; integers must fit, booleans must be booleans."""
    kind = value.dtype.kind
    name = DATATYPES[spec.dtype]
    if value.size == 0:
        return value.astype(spec.dtype.numpy)
    if spec.dtype == DType.BOOL:
        if kind != "b":
            raise InputData(
                f"input {spec.name!r}: expected {name} values true/false, got {_got(value)}"
            )
        return value
    if spec.dtype in _INTEGERS:
        if kind not in "iu":
            raise InputData(f"input {spec.name!r}: expected {name} integers, got {_got(value)}")
        limits = np.iinfo(spec.dtype.label)
        low, high = int(value.min()), int(value.max())
        if low < limits.min or high > limits.max:
            bad = low if low < limits.min else high
            raise InputData(
                f"input {spec.name!r}: expected {name} integers from {limits.min} to "
                f"{limits.max}, got {bad}"
            )
        return value.astype(spec.dtype.numpy)
    if kind not in "iuf":
        raise InputData(f"input {spec.name!r}: expected {name} numbers, got {_got(value)}")
    narrow = spec.dtype in (DType.FP16, DType.FP32, DType.BF16)
    kind_of = np.float32 if spec.dtype == DType.BF16 else spec.dtype.numpy
    with np.errstate(over="ignore"):
        typed = value.astype(kind_of)
    if narrow and not np.isfinite(typed).all() and np.isfinite(value).all():
        top = float(np.finfo(typed.dtype).max)
        bad = value.reshape(-1)[np.argmax(~np.isfinite(typed).reshape(-1))].item()
        raise InputData(
            f"input {spec.name!r}: expected {name} numbers from {-top:g} to {top:g}, got {bad!r}"
        )
    if spec.dtype == DType.BF16:  # truncate float32 to its upper half
        return (typed.view(np.uint32) >> 16).astype(np.uint16)
    return typed


def _got(value: np.ndarray) -> str:
    kinds = {"b": "booleans", "i": "integers", "u": "integers", "f": "non-integer numbers"}
    kinds |= {"U": "strings", "S": "strings"}
    if value.dtype.kind == "O" and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value.flat
    ):
        return "integers outside the 64-bit range"
    return kinds.get(value.dtype.kind, "values that are not all numbers (null, objects, mixed)")
