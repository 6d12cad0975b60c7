"""KServe V2 binary requests as a client sends them: a JSON header whose inputs name their byte
sizes, then the tensors' raw bytes, and the header's length in Inference-Header-Content-Length."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def binary_input(x: np.ndarray, name: str = "x") -> dict[str, Any]:
    """An FP32 input whose data follows the header as raw bytes."""
    assert x.dtype == np.float32, f"expected a float32 array, got {x.dtype}"
    return {
        "name": name,
        "datatype": "FP32",
        "shape": list(x.shape),
        "parameters": {"binary_data_size": x.nbytes},
    }


def binary_request(
    doc: Mapping[str, Any], tensors: Sequence[np.ndarray]
) -> tuple[bytes, dict[str, str]]:
    """The body (header, then each tensor's bytes in order) and the header-length header."""
    header = json.dumps(doc).encode()
    body = header + b"".join(t.tobytes() for t in tensors)
    return body, {"Inference-Header-Content-Length": str(len(header))}
