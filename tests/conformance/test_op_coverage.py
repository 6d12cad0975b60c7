"""Every op type the conformance models use is registered, so none is refused as OP_UNKNOWN."""

from __future__ import annotations

from collections import Counter

import pytest

from graph_proto import framework_pb2 as pb
from tests.conformance.models import MODELS
from validator.ops import REGISTRY

pytestmark = pytest.mark.paddle


def op_histogram() -> dict[str, Counter[str]]:
    """op type -> how many times each model uses it (all blocks)."""
    uses: dict[str, Counter[str]] = {}
    for name, build in MODELS.items():
        program = pb.ProgramDesc.FromString(build().program)
        for block in program.blocks:
            for op in block.ops:
                uses.setdefault(op.type, Counter())[name] += 1
    return uses


def test_every_model_op_is_registered() -> None:
    uses = op_histogram()
    missing = sorted(t for t in uses if t not in REGISTRY)
    lines = [
        f"  {t}: {sum(uses[t].values())} uses in {', '.join(sorted(uses[t]))}" for t in missing
    ]
    assert not missing, f"{len(missing)} op types are not registered:\n" + "\n".join(lines)
