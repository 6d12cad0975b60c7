"""Typed errors of malformed V2 inference requests; server/http/errors.py maps their bases to 400/413.

A condition the executor's Scope also checks (a missing or unknown input, a datatype, a rank or
a shape that is not the signature's) has one code wherever it is found: these classes are also
the executor's classes (`executor.errors`), so a client matches one code, whichever layer
refused the request.
"""

from __future__ import annotations

from executor.errors import MissingInput, UnexpectedInput, WrongDType, WrongRank, WrongShape
from server.errors import BadRequest, PayloadTooLarge


class InferRequestInvalid(BadRequest):
    """The family of V2 request errors below (each subclass is one code)."""

    code = "INFER_REQUEST_INVALID"


class InferMalformed(InferRequestInvalid):
    """Not JSON (over gRPC: not a protobuf message), or not shaped like a V2 inference request."""

    code = "INFER_MALFORMED"


class InferHeaderLength(InferRequestInvalid):
    """`Inference-Header-Content-Length` not an integer within the body."""

    code = "INFER_HEADER_LENGTH"


class InferUnsupported(InferRequestInvalid):
    """A protocol feature graphgate does not offer (shared memory, classification, an encoding)."""

    code = "INFER_UNSUPPORTED"


class InputMissing(InferRequestInvalid, MissingInput):
    """An input of the model is not in the request."""

    code = MissingInput.code


class InputUnknown(InferRequestInvalid, UnexpectedInput):
    """The request names an input the model does not have."""

    code = UnexpectedInput.code


class InputDuplicate(InferRequestInvalid):
    """The same input twice."""

    code = "INFER_INPUT_DUPLICATE"


class InputDatatype(InferRequestInvalid, WrongDType):
    """A V2 datatype that is not the input's."""

    code = WrongDType.code


class InputRank(InferRequestInvalid, WrongRank):
    """A shape with another number of dims than the input's."""

    code = WrongRank.code


class InputShape(InferRequestInvalid, WrongShape):
    """A shape that does not fit the input's fixed dims, or data nested unlike the shape."""

    code = WrongShape.code


class InputElementCount(InferRequestInvalid):
    """JSON `data` (over gRPC: typed `contents`) whose element count differs from the product
    of `shape`."""

    code = "INFER_ELEMENT_COUNT"


class InputData(InferRequestInvalid):
    """Values that do not fit the datatype (a string in FP32 data, 300 in UINT8, a BOOL byte 2)."""

    code = "INFER_DATA"


class InputDataSource(InferRequestInvalid):
    """Neither or both of `data` and `parameters.binary_data_size` (over gRPC: typed `contents`
    in another datatype's field, or not one `raw_input_contents` entry per input)."""

    code = "INFER_DATA_SOURCE"


class BinarySizeMismatch(InferRequestInvalid):
    """A `binary_data_size` that disagrees with the shape, or binary bytes that do not add up."""

    code = "INFER_BINARY_SIZE"


class OutputUnknown(InferRequestInvalid):
    """A requested output the model does not have."""

    code = "INFER_OUTPUT_UNKNOWN"


class OutputDuplicate(InferRequestInvalid):
    """The same output requested twice."""

    code = "INFER_OUTPUT_DUPLICATE"


class InferBodyTooLarge(PayloadTooLarge):
    """A decompressed inference body over `GRAPHGATE_MAX_INFER_BYTES`: the same condition, and
    code, as a body over its cap on the wire (server/http/body_limit.py)."""
