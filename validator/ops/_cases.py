"""Deterministic example arrays for op cases."""

from __future__ import annotations

import numpy as np

_RNG = np.random.default_rng(20261130)


def f32(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


def pos32(*shape: int) -> np.ndarray:
    """Strictly positive floats (for log, sqrt, pow)."""
    # NOTE: np.asarray: for shape () numpy returns a scalar, which onnxruntime does not take.
    return np.asarray(_RNG.random(shape) + 0.5).astype(np.float32)


def i64(*shape: int, high: int = 5) -> np.ndarray:
    return _RNG.integers(0, high, shape).astype(np.int64)


def i32(*shape: int, high: int = 5) -> np.ndarray:
    return _RNG.integers(0, high, shape).astype(np.int32)


def boolean(*shape: int) -> np.ndarray:
    return np.asarray(_RNG.random(shape) > 0.5)
