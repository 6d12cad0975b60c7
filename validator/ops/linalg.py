"""Matrix products: matmul_v2, matmul, mul."""

from __future__ import annotations

from validator.ops._def import OpDef

OPS: tuple[OpDef, ...] = ()
