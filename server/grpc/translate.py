"""Between the messages of `inference.GRPCInferenceService` and the V2 REST request and answer.

A ModelInferRequest becomes the V2 binary request tritonclient.http would send (a JSON header,
then each input's raw bytes), which server/v2/codec.py checks like every REST request: one
decoder, one set of checks and of error codes for both protocols. The header stays a document
(a dict), handed to the codec as is: writing it as JSON only for the codec to parse it again
cost ~25% of a small call's time on the event loop. What only gRPC
has is checked here: typed `contents` in the field of their datatype, in the right number, and
one `raw_input_contents` entry per input. The encoded V2 answer (binary outputs) becomes a
ModelInferResponse: `raw_output_contents`, or typed `contents` when the client asks for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson

from graph_proto.types import DType
from server.grpc import grpc_predict_v2_pb2 as pb
from server.v2 import codec
from server.v2.codec import InferRequest
from server.v2.errors import (
    InferMalformed,
    InferUnsupported,
    InputData,
    InputDataSource,
    InputElementCount,
)
from validator import TensorSpec

# The field of InferTensorContents each datatype travels in, and the numpy type of its elements.
# FP16 and BF16 have none: they travel as raw contents only.
TYPED_FIELDS: Final[Mapping[str, tuple[str, type[np.generic]]]] = {
    "BOOL": ("bool_contents", np.bool_),
    "UINT8": ("uint_contents", np.uint8),
    "UINT16": ("uint_contents", np.uint16),
    "UINT32": ("uint_contents", np.uint32),
    "UINT64": ("uint64_contents", np.uint64),
    "INT8": ("int_contents", np.int8),
    "INT16": ("int_contents", np.int16),
    "INT32": ("int_contents", np.int32),
    "INT64": ("int64_contents", np.int64),
    "FP32": ("fp32_contents", np.float32),
    "FP64": ("fp64_contents", np.float64),
}
RAW_ONLY: Final = frozenset({"FP16", "BF16"})
_FIELDS: Final = (*dict.fromkeys(name for name, _ in TYPED_FIELDS.values()), "bytes_contents")
# A shape that numpy (at most 64 dims) or the codec (dims up to 2**31 - 1) refuses is left to
# the codec, which says so; counting its elements here could cost a huge product first.
_MAX_RANK: Final = 64
_MAX_DIM: Final = 2**31 - 1
_DTYPES: Final[Mapping[str, DType]] = {name: dtype for dtype, name in codec.DATATYPES.items()}


@dataclass(frozen=True, slots=True)
class V2Request:
    """A ModelInferRequest as a V2 binary request: its JSON header's document (the object
    tritonclient.http would send, never written as JSON: `decode` hands it to the codec as
    is), the inputs' bytes in order, and how the answer's outputs travel back (`typed`: in
    `contents`, else in `raw_output_contents`)."""

    document: dict[str, Any]
    binary: bytes | memoryview
    typed: bool

    def decode(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> InferRequest:
        """The request checked against a signature by the codec, as a REST body would be."""
        return codec.decode_document(self.document, self.binary, inputs, outputs)


def to_v2(request: pb.ModelInferRequest, outputs: Sequence[TensorSpec]) -> V2Request:
    """The V2 binary request of `request`, for a model whose outputs are `outputs`."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InputDataSource(
            f"raw_input_contents: expected one entry per input ({len(request.inputs)}), "
            f"got {len(raw)}"
        )
    inputs, chunks = [], []
    for index, tensor in enumerate(request.inputs):
        data = raw[index] if raw else _typed_bytes(tensor)
        params = _parameters(tensor.parameters)
        params["binary_data_size"] = len(data)
        inputs.append(
            {
                "name": tensor.name,
                "datatype": tensor.datatype,
                "shape": list(tensor.shape),
                "parameters": params,
            }
        )
        chunks.append(data)
    requested, typed = _requested(request, outputs)
    document: dict[str, Any] = {
        "parameters": _parameters(request.parameters),
        "inputs": inputs,
        "outputs": requested,
    }
    if request.id:
        document["id"] = request.id
    # one input (the usual request): its bytes as they are, not copied into a joined body
    binary = memoryview(chunks[0]) if len(chunks) == 1 else b"".join(chunks)
    return V2Request(document, binary, typed=typed)


def from_v2(body: bytes, headers: Mapping[str, str], typed: bool) -> pb.ModelInferResponse:
    """The ModelInferResponse of a V2 binary answer (every output binary: `to_v2` asks so)."""
    split = int(headers[codec.HEADER_LENGTH])
    view = memoryview(body)
    doc = orjson.loads(view[:split])  # the header read in place, not copied out first
    response = pb.ModelInferResponse(
        model_name=doc["model_name"], model_version=doc["model_version"], id=doc.get("id", "")
    )
    offset = split
    for entry in doc["outputs"]:
        size = entry["parameters"]["binary_data_size"]
        data = view[offset : offset + size]
        offset += size
        out = response.outputs.add(name=entry["name"], datatype=entry["datatype"])
        out.shape.extend(entry["shape"])
        if typed:
            _fill_contents(out.contents, entry["datatype"], data)
        else:
            response.raw_output_contents.append(bytes(data))
    return response


# -- inputs ------------------------------------------------------------------------------------


def _typed_bytes(tensor: pb.ModelInferRequest.InferInputTensor) -> bytes:
    """An input's typed `contents` as the raw bytes of its datatype, once they are found in the
    field of that datatype and in the number its shape says. A datatype graphgate never takes
    yields no bytes: the codec refuses the datatype itself, with its message."""
    name, datatype, contents = tensor.name, tensor.datatype, tensor.contents
    present = [field for field in _FIELDS if len(getattr(contents, field))]
    if datatype in RAW_ONLY:
        raise InferUnsupported(
            f"input {name!r}: {datatype} elements travel in raw_input_contents only "
            "(InferTensorContents has no field for them)"
        )
    if datatype not in TYPED_FIELDS or datatype not in _DTYPES:
        return b""
    field, kind = TYPED_FIELDS[datatype]
    if stray := [f for f in present if f != field]:
        raise InputDataSource(
            f"input {name!r}: expected {datatype} elements in contents.{field}, got "
            f"{', '.join(f'contents.{f}' for f in stray)}"
        )
    values = getattr(contents, field)
    if (count := _element_count(tensor.shape)) is not None and count != len(values):
        raise InputElementCount(
            f"input {name!r}: expected {count} elements for shape {list(tensor.shape)[:8]}, "
            f"got {len(values)}"
        )
    return _narrowed(name, datatype, values, kind).tobytes()


def _element_count(shape: Sequence[int]) -> int | None:
    if len(shape) > _MAX_RANK or not all(0 <= d <= _MAX_DIM for d in shape):
        return None
    return math.prod(shape)


def _narrowed(name: str, datatype: str, values: Any, kind: type[np.generic]) -> np.ndarray:
    """`values` (a repeated field of 32 or 64-bit elements) as `kind`; integers must fit."""
    wide = np.asarray(values)
    if wide.size and np.issubdtype(kind, np.integer) and wide.dtype != kind:
        limits = np.iinfo(np.dtype(kind))
        low, high = int(wide.min()), int(wide.max())
        if low < limits.min or high > limits.max:
            raise InputData(
                f"input {name!r}: expected {datatype} integers from {limits.min} to "
                f"{limits.max}, got {low if low < limits.min else high}"
            )
    return wide.astype(kind, copy=False)


def _parameters(parameters: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    """A message's `parameters` as their JSON counterpart (most messages have none: no walk)."""
    if not parameters:
        return {}
    return {key: _value(value) for key, value in parameters.items()}


def _value(parameter: pb.InferParameter) -> Any:
    """A parameter's value as its JSON counterpart would be (None when no choice is set)."""
    choice = parameter.WhichOneof("parameter_choice")
    return None if choice is None else getattr(parameter, choice)


# -- outputs -----------------------------------------------------------------------------------


def _requested(
    request: pb.ModelInferRequest, outputs: Sequence[TensorSpec]
) -> tuple[list[dict[str, Any]], bool]:
    """The V2 `outputs` of the request (every output binary: the bytes come back untouched) and
    whether the client wants typed `contents` rather than raw ones.

    A response carries `raw_output_contents` for every output or for none (the protocol), so
    the outputs' `binary_data` must agree; the default is raw, as Triton answers, unless the
    request parameter `binary_data_output` is false."""
    default = True
    if "binary_data_output" in request.parameters:
        value = _value(request.parameters["binary_data_output"])
        default = _boolean(value, "request parameter 'binary_data_output'")
    if not request.outputs:
        names = [spec.name for spec in outputs]
        requested = [{"name": name, "parameters": {"binary_data": True}} for name in names]
        raw = {default}
    else:
        names, requested, raw = [], [], set()
        for out in request.outputs:
            params = _parameters(out.parameters)
            where = f"requested output {out.name!r} 'binary_data'"
            raw.add(_boolean(params.get("binary_data", default), where))
            params["binary_data"] = True
            names.append(out.name)
            requested.append({"name": out.name, "parameters": params})
    if len(raw) > 1:
        raise InferUnsupported(
            "outputs: expected every output raw or every output typed (binary_data all true or "
            "all false), got both: a response carries raw_output_contents for all or none"
        )
    typed = raw == {False}
    if typed:
        _refuse_raw_only(outputs, names)
    return requested, typed


def _boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise InferMalformed(f"{where}: expected a boolean, got {value!r}"[:200])
    return value


def _refuse_raw_only(outputs: Sequence[TensorSpec], names: Sequence[str]) -> None:
    """Typed outputs asked for: none may have a datatype without a typed field (FP16, BF16)."""
    for spec in outputs:
        datatype = codec.DATATYPES[spec.dtype]
        if spec.name in names and datatype in RAW_ONLY:
            raise InferUnsupported(
                f"output {spec.name!r}: {datatype} elements travel in raw_output_contents only "
                "(ask for raw outputs: binary_data true)"
            )


def _fill_contents(contents: pb.InferTensorContents, datatype: str, data: memoryview) -> None:
    field, _kind = TYPED_FIELDS[datatype]
    values = np.frombuffer(data, _DTYPES[datatype].numpy)
    getattr(contents, field).extend(values.tolist())
