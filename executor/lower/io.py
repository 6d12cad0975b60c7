"""feed and fetch become the ONNX graph's inputs and outputs (executor/convert.py), not nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

BOUNDARY_OPS: Final = frozenset({"feed", "fetch"})
EMITTERS: Final[dict[str, Callable[..., Any]]] = {}
