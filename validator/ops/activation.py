"""Elementwise activations and unary math: same shape out as in, plus cast, scale, clip, dropout, softmax."""

from __future__ import annotations

from validator.ops._def import OpDef

OPS: tuple[OpDef, ...] = ()
