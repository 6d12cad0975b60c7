"""Spatial resampling and padding: interpolation, pad3d, pixel_shuffle, flip."""

from __future__ import annotations

from validator.ops._def import OpDef

OPS: tuple[OpDef, ...] = ()
