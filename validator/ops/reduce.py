"""Reductions and scans: reduce_*, logsumexp, p_norm, arg_max/min, top_k_v2, cumsum."""

from __future__ import annotations

from validator.ops._def import OpDef

OPS: tuple[OpDef, ...] = ()
