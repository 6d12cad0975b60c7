"""Ops that move data without arithmetic: reshape, transpose, squeeze, concat, split, slice, expand."""

from __future__ import annotations

from validator.ops._def import OpDef

OPS: tuple[OpDef, ...] = ()
