"""Gathering by index and one-hot encoding: gather, index_select, lookup_table_v2, one_hot_v2, where."""

from __future__ import annotations

from validator.ops._def import OpDef

OPS: tuple[OpDef, ...] = ()
