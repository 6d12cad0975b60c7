"""Convolution, pooling and normalization layers (NCHW and NHWC)."""

from __future__ import annotations

from validator.ops._def import OpDef

OPS: tuple[OpDef, ...] = ()
