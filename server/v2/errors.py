"""Typed errors of malformed V2 inference requests; server/errors.py maps their bases to 400/413."""

from __future__ import annotations

from server.services.types import BadRequest, PayloadTooLarge


class InferRequestInvalid(BadRequest):
    """The family of V2 request errors: each subclass is one documented code."""

    code = "INFER_REQUEST_INVALID"


class InferMalformed(InferRequestInvalid):
    """Not JSON, or JSON not shaped like an inference request."""

    code = "INFER_MALFORMED"


class InferHeaderLength(InferRequestInvalid):
    """Inference-Header-Content-Length that is not an integer within the body."""

    code = "INFER_HEADER_LENGTH"


class InferUnsupported(InferRequestInvalid):
    """A protocol feature graphgate does not offer (shared memory, classification, an encoding)."""

    code = "INFER_UNSUPPORTED"


class InputMissing(InferRequestInvalid):
    code = "INFER_INPUT_MISSING"


class InputUnknown(InferRequestInvalid):
    code = "INFER_INPUT_UNKNOWN"


class InputDuplicate(InferRequestInvalid):
    code = "INFER_INPUT_DUPLICATE"


class InputDatatype(InferRequestInvalid):
    code = "INFER_DATATYPE"


class InputShape(InferRequestInvalid):
    code = "INFER_SHAPE"


class InputElementCount(InferRequestInvalid):
    """JSON `data` whose element count differs from the product of `shape`."""

    code = "INFER_ELEMENT_COUNT"


class InputData(InferRequestInvalid):
    """Values that do not fit the datatype: a string in FP32 data, 300 in UINT8, a BOOL byte 2."""

    code = "INFER_DATA"


class InputDataSource(InferRequestInvalid):
    """Neither or both of `data` and `parameters.binary_data_size`."""

    code = "INFER_DATA_SOURCE"


class BinarySizeMismatch(InferRequestInvalid):
    """A binary_data_size that disagrees with the shape, or binary bytes that do not add up."""

    code = "INFER_BINARY_SIZE"


class OutputUnknown(InferRequestInvalid):
    code = "INFER_OUTPUT_UNKNOWN"


class OutputDuplicate(InferRequestInvalid):
    code = "INFER_OUTPUT_DUPLICATE"


class InferBodyTooLarge(PayloadTooLarge):
    """The request body, or its decompressed size, exceeds the configured cap."""

    code = "INFER_BODY_TOO_LARGE"
