"""Whole models saved by real Paddle: graphgate accepts them and infers exactly Paddle's types.

For every var of every model the inferred dtype and dims must equal what Paddle recorded in the
saved program. Where Paddle records -1 graphgate may know the size only for a reason listed in
SHARPER. Vars graphgate does not infer at all are only the outputs listed in NOT_INFERRED and
vars no op writes. Any other exemption must be principled and listed in EXEMPT with its reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import cache

import pytest

from graph_proto import framework_pb2 as pb
from tests.conformance.models import MODELS
from tests.conformance.paddle_util import dims_differences, recorded_types
from validator import ValidatedProgram, ValidationFailed, validate

pytestmark = pytest.mark.paddle

# "op_type.OutputSlot" -> why graphgate never infers that output (its OpDef marks it unused, so
# no op may read it and nothing is compared). Everything else Paddle records must be inferred.
_GRAD_ONLY = "kept only for the backward op; an inference program never reads it"
NOT_INFERRED: dict[str, str] = {
    "batch_norm.SavedMean": f"batch statistics {_GRAD_ONLY} (Paddle records dims [])",
    "batch_norm.SavedVariance": f"batch statistics {_GRAD_ONLY} (Paddle records dims [])",
    "layer_norm.Mean": f"per-row statistics {_GRAD_ONLY}",
    "layer_norm.Variance": f"per-row statistics {_GRAD_ONLY}",
    "reshape2.XShape": f"the input's dims behind a 0, {_GRAD_ONLY}",
}
# Vars that no op writes are not inferred either: save_inference_model prunes unused outputs
# (XShape of transpose2/squeeze2/flatten_contiguous_range, dropout Mask) from their ops but keeps
# the VarDescs, so nothing computes them.

# "op_type.OutputSlot" -> why graphgate may infer something other than what Paddle recorded
# for that output. Empty: every inferred var of every model matches Paddle.
EXEMPT: dict[str, str] = {}

# "op_type.OutputSlot" -> why graphgate may know a size where Paddle records -1 (e.g. constant
# folding of shape arithmetic). Empty: on these models graphgate is never sharper than Paddle.
SHARPER: dict[str, str] = {}

_SHOWN_DIAGNOSTICS = 40


def writers(program_bytes: bytes) -> dict[str, str]:
    """var name -> "op_type.OutputSlot" of the block-0 op that writes it."""
    program = pb.ProgramDesc.FromString(program_bytes)
    return {
        name: f"{op.type}.{slot.parameter}"
        for op in program.blocks[0].ops
        for slot in op.outputs
        for name in slot.arguments
    }


def written_by(program_bytes: bytes, slots: Iterable[str]) -> list[str]:
    """The vars written in block 0 by any of `slots` ("op_type.OutputSlot")."""
    wanted = set(slots)
    return [name for name, slot in writers(program_bytes).items() if slot in wanted]


def sharper_than_paddle(
    validated: ValidatedProgram, program_bytes: bytes, exempt: Iterable[str] = ()
) -> list[str]:
    """Vars (not in `exempt`) where Paddle records -1 but graphgate infers a size."""
    skipped = set(exempt)
    found = []
    for name, (_, dims) in recorded_types(program_bytes).items():
        ours = validated.types.get(name)
        if ours is None or name in skipped or len(ours.shape) != len(dims):
            continue
        if any(p == -1 and o != -1 for p, o in zip(dims, ours.shape, strict=True)):
            found.append(f"{name}: paddle {list(dims)}, graphgate {list(ours.shape)}")
    return found


@cache
def _validate(name: str) -> ValidatedProgram | list[str]:
    """The validated model, or its diagnostics as lines."""
    saved = MODELS[name]()
    try:
        return validate(saved.program, saved.params)
    except ValidationFailed as e:
        codes = Counter(d.code.name for d in e.diagnostics)
        lines = [f"{name} rejected {dict(codes)}:"]
        lines += [f"  {d}" for d in e.diagnostics[:_SHOWN_DIAGNOSTICS]]
        if len(e.diagnostics) > _SHOWN_DIAGNOSTICS:
            lines.append(f"  ... and {len(e.diagnostics) - _SHOWN_DIAGNOSTICS} more")
        return lines


def validated_or_fail(name: str) -> ValidatedProgram:
    result = _validate(name)
    if isinstance(result, list):
        pytest.fail("\n".join(result), pytrace=False)
    return result


@pytest.mark.parametrize("name", list(MODELS))
def test_model_is_accepted_with_paddles_dims(name: str) -> None:
    saved = MODELS[name]()
    validated = validated_or_fail(name)

    exempt = written_by(saved.program, EXEMPT)
    differences = dims_differences(validated, saved.program, exempt=exempt)
    assert differences == [], f"{name}: {len(differences)} vars differ:\n" + "\n".join(differences)

    sharper = sharper_than_paddle(validated, saved.program, written_by(saved.program, SHARPER))
    assert sharper == [], f"{name}: knows sizes Paddle does not (see SHARPER):\n" + "\n".join(
        sharper
    )


@pytest.mark.parametrize("name", list(MODELS))
def test_only_listed_outputs_go_uninferred(name: str) -> None:
    saved = MODELS[name]()
    validated = validated_or_fail(name)
    written = writers(saved.program)

    unexplained = [
        f"{var} (written by {written[var]})"
        for var in recorded_types(saved.program)
        if var not in validated.types and var in written and written[var] not in NOT_INFERRED
    ]
    assert unexplained == [], f"{name}: vars Paddle records but graphgate does not infer:\n" + (
        "\n".join(unexplained)
    )


@pytest.mark.parametrize("name", list(MODELS))
def test_report_signature_is_the_saved_feeds_and_fetches(name: str) -> None:
    saved = MODELS[name]()
    validated = validated_or_fail(name)
    recorded = recorded_types(saved.program)

    assert [t.name for t in validated.inputs] == saved.feeds
    assert [t.name for t in validated.outputs] == saved.fetches
    for spec in validated.inputs:  # a feed is exactly what the client declared, -1 included
        assert (int(spec.dtype), tuple(spec.dims)) == recorded[spec.name]
    for spec in validated.outputs:
        assert int(spec.dtype) == recorded[spec.name][0]
    assert validated.report.op_count == len(pb.ProgramDesc.FromString(saved.program).blocks[0].ops)
