"""validator/dims.py asks an op's shape rule which sizes of one unknown dim it accepts, on a
finite set of sizes, and records the rule it finds (one size, multiples, up to, from). For every
op with a shape rule and every dim of every input of its first valid case: that rule,
instantiated at random sizes outside the set it was found on, agrees with concrete inference.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from executor.lower import BOUNDARY_OPS
from tests.ops.cases import decoded_attrs, input_values, tensor_type
from validator.dims import Classified, candidate_sizes, classify
from validator.infer import infer_values
from validator.ops import REGISTRY, Case, GraphError, OpDef, TensorType

LIMIT = 4096
SAMPLES = 16


def _first_valid(op: OpDef) -> Case | None:
    return next((c for c in op.cases if c.raises is None), None)


def _typed(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(tensor_type(v) for v in value)
    return tensor_type(value)


def _dims_of(op: OpDef, case: Case) -> list[tuple[int, int]]:
    """(input position, axis) of every dim of every single-tensor input."""
    found = []
    for position, value in enumerate(input_values(op, case)):
        if isinstance(value, np.ndarray):
            found.extend((position, axis) for axis in range(value.ndim))
    return found


def _accepts(op: OpDef, case: Case, position: int, axis: int) -> Any:
    attrs = decoded_attrs(op, case)
    values = [_typed(v) for v in input_values(op, case)]
    original: TensorType = values[position]

    def accepts(size: int) -> bool:
        shape = list(original.shape)
        shape[axis] = size
        values[position] = TensorType(original.dtype, tuple(shape))  # its values unknown now
        try:
            infer_values(op, values, attrs)
        except GraphError:
            return False
        return True

    return accepts


OPS = [
    pytest.param(op, id=op.op_type)
    for op in REGISTRY
    if op.op_type not in BOUNDARY_OPS and _first_valid(op) is not None
]


@pytest.mark.parametrize("op", OPS)
def test_the_rule_found_for_each_dim_agrees_with_concrete_inference(op: OpDef) -> None:
    case = _first_valid(op)
    assert case is not None
    context = [d for v in input_values(op, case) if isinstance(v, np.ndarray) for d in v.shape]
    rng = random.Random(op.op_type)
    disagreements = []
    for position, axis in _dims_of(op, case):
        accepts = _accepts(op, case, position, axis)
        found: Classified = classify(accepts, candidate_sizes(context, LIMIT))
        if found.unclassified or found.unsatisfiable:
            continue  # dims.solve refuses such a dim as a contradiction: nothing to instantiate
        for size in (rng.randrange(1, LIMIT) for _ in range(SAMPLES)):
            predicted = True if found.constraint is None else found.constraint.holds(size)
            if predicted != accepts(size):
                rule = found.constraint.text() if found.constraint else "any size"
                disagreements.append(
                    f"input {position} dim {axis}: {rule}, but {size} -> {not predicted}"
                )
    assert disagreements == []
