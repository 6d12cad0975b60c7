"""Ops that create tensors from attributes: fill_constant, fill_any_like, assign_value, range, shape."""

from __future__ import annotations

from validator.ops._def import OpDef

OPS: tuple[OpDef, ...] = ()
