"""Every op graphgate declares for legacy programs can arrive in a PIR program: the PIR table
(graph_proto/pir_ops.py) maps a pd_op onto it, or NOT_IN_TABLE says why none does (the
converter writes it for a PIR construct, or Paddle 3 never emits its PIR form)."""

from __future__ import annotations

from graph_proto.pir_ops import NOT_IN_TABLE, OPS
from validator.ops import REGISTRY


def test_every_declared_op_has_a_pir_name_or_a_reason() -> None:
    mapped = {op_map.legacy for op_map in OPS.values()}
    declared = {op.op_type for op in REGISTRY}
    assert sorted(declared - mapped - NOT_IN_TABLE.keys()) == []


def test_reasons_are_given_only_for_declared_unmapped_ops() -> None:
    mapped = {op_map.legacy for op_map in OPS.values()}
    declared = {op.op_type for op in REGISTRY}
    assert sorted(NOT_IN_TABLE.keys() - declared) == []
    assert sorted(NOT_IN_TABLE.keys() & mapped) == []
    assert all(reason.strip() for reason in NOT_IN_TABLE.values())
