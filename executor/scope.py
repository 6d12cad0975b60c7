"""Per-request Scope: checks every feed against the signature and every fetch against re-inference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np

from executor.errors import (
    InputTooLarge,
    MissingInput,
    OutputMismatch,
    UnexpectedInput,
    WrongDType,
    WrongRank,
    WrongShape,
)
from graph_proto.types import DType
from validator import TensorSpec
from validator.ops import TensorType

DEFAULT_MAX_REQUEST_BYTES: Final = 256 * 1024 * 1024


class Scope:
    """One request's feeds; created per request, never shared, dropped after the request."""

    def __init__(
        self, signature: tuple[TensorSpec, ...], max_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    ) -> None:
        self._signature = signature
        self._max_bytes = max_bytes
        self._feeds: dict[str, np.ndarray] = {}

    def feed_all(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Checks names, dtypes, ranks, fixed dims and the byte cap; returns the feeds by name."""
        expected = [spec.name for spec in self._signature]
        if missing := [name for name in expected if name not in feeds]:
            raise MissingInput(
                f"expected inputs {expected}, got {sorted(feeds)}: missing {missing}"
            )
        # None missing: another name is there only if there are more names than expected.
        if len(feeds) != len(expected) and (extra := sorted(set(feeds) - set(expected))):
            raise UnexpectedInput(
                f"expected inputs {expected}, got {sorted(feeds)}: unknown {extra}"
            )
        values = {spec.name: np.asarray(feeds[spec.name]) for spec in self._signature}
        # The cap first: nothing else is looked at in a request over it.
        total = sum(value.nbytes for value in values.values())
        if total > self._max_bytes:
            raise InputTooLarge(f"expected at most {self._max_bytes} input bytes, got {total}")
        for spec in self._signature:
            value = values[spec.name]
            _check_feed(spec, value)
            # NOTE: np.ascontiguousarray makes a 0-D array 1-D; a 0-D array is always contiguous.
            self._feeds[spec.name] = (
                value if value.flags.c_contiguous else np.ascontiguousarray(value)
            )
        return self._feeds

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(value.shape) for name, value in self._feeds.items()}


def _check_feed(spec: TensorSpec, value: np.ndarray) -> None:
    if value.dtype != spec.dtype.numpy or spec.dtype == DType.BF16:
        raise WrongDType(f"input {spec.name!r}: expected {spec.dtype.label}, got {value.dtype}")
    if value.ndim != len(spec.dims):
        raise WrongRank(
            f"input {spec.name!r}: expected rank {len(spec.dims)} (dims {list(spec.dims)}), "
            f"got rank {value.ndim} (shape {list(value.shape)})"
        )
    for axis, (want, got) in enumerate(zip(spec.dims, value.shape, strict=True)):
        if want >= 0 and want != got:
            raise WrongShape(
                f"input {spec.name!r}: expected dims {list(spec.dims)}, got {list(value.shape)} "
                f"(axis {axis} must be {want})"
            )


def check_outputs(outputs: Mapping[str, np.ndarray], expected: Mapping[str, TensorType]) -> None:
    """Every fetched array must have the dtype and the dims re-inferred for this request; a dim
    the data decides, within its bound when it has one (TensorType.bound: NMS keeps at most
    keep_top_k boxes an image)."""
    for name, value in outputs.items():
        want = expected[name]
        if value.dtype != want.dtype.numpy or not _dims_agree(value.shape, want):
            within = f" (at most {list(want.bound)})" if want.bound is not None else ""
            raise OutputMismatch(
                f"output {name!r}: expected {want.dtype.label}{list(want.shape)}{within}, "
                f"got {value.dtype}{list(value.shape)}"
            )


def _dims_agree(got: tuple[int, ...], want: TensorType) -> bool:
    if got == want.shape:  # every dim known and equal: most fetches
        return True
    if len(got) != len(want.shape):
        return False
    bound = want.bound or (-1,) * len(got)
    return all(
        w == g or (w < 0 and (b < 0 or g <= b))
        for w, b, g in zip(want.shape, bound, got, strict=True)
    )


__all__ = ["Scope", "check_outputs"]
