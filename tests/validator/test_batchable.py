"""The batch-independence proof on whole programs: small hand-built ones, and the batchability
of every conformance model (the figure of issue 13), pinned with the op that couples rows."""

from __future__ import annotations

from typing import Final

import pytest

from graph_proto.types import DType
from tests.support.builders import V, affine, conv, mlp
from validator import validate


def _report(g: object) -> tuple[bool, str | None]:
    built = g.built()  # type: ignore[attr-defined]
    report = validate(built.program, built.params).report
    return report.batchable, report.batch_coupling


@pytest.mark.parametrize("build", [affine, mlp, conv], ids=["affine", "mlp", "conv"])
def test_rowwise_programs_are_batchable(build: object) -> None:
    assert _report(build()) == (True, None)  # type: ignore[operator]


def test_the_report_json_says_batchable() -> None:
    built = affine().built()
    body = validate(built.program, built.params).report.to_json()
    assert (body["batchable"], body["batch_coupling"]) == (True, None)


def test_a_reduction_over_the_batch_names_the_op() -> None:
    g = affine()
    g.node("reduce_mean", {"X": ["y"]}, {"Out": [V("m", [1])]}, {"dim": [0], "keep_dim": True})
    g.fetch("m")
    assert _report(g) == (False, "block 0, op 4 (reduce_mean): reduces over the batch dimension")


def test_a_feed_without_a_dynamic_batch_dim_is_not_batchable() -> None:
    assert _report(affine(batch=1)) == (
        False,
        "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at axis 0 of feed 'x', "
        "got dims [1, 4]",
    )


def test_a_fetch_without_the_batch_is_not_batchable() -> None:
    g = affine()
    g.node("reduce_sum", {"X": ["y"]}, {"Out": [V("s", [-1])]}, {"dim": [1]})
    g.node("shape", {"Input": ["y"]}, {"Out": [V("n", [2], DType.INT32)]})
    g.fetch("n")
    assert _report(g) == (
        False,
        "block 0, op 5 (shape): reads the batch size: its value depends on how many rows run "
        "together",
    )


def test_a_transpose_that_moves_the_batch_must_move_it_back() -> None:
    g = affine()
    g.node("transpose2", {"X": ["y"]}, {"Out": [V("t", [4, -1])]}, {"axis": [1, 0]})
    g.fetch("t")
    assert _report(g) == (
        False,
        "block 0, op 5 (fetch): expected fetched 't' to carry the batch dimension at axis 0, "
        "got the batch dimension at axis 1",
    )


def test_a_product_over_the_batch_couples() -> None:
    g = affine()
    g.node("matmul_v2", {"X": ["y"], "Y": ["y"]}, {"Out": [V("gram", [4, 4])]}, {"trans_x": True})
    g.fetch("gram")
    assert _report(g) == (
        False,
        "block 0, op 4 (matmul_v2): contracts over the batch dimension",
    )


# The figure: every conformance model, the text classifier and the control-flow programs.
# None: proven batchable; otherwise the first op that couples rows, and why.
BATCHABILITY: Final[dict[str, str | None]] = {
    "resnet18": None,
    "resnet50": None,
    "mobilenet_v1": None,
    "mobilenet_v2": None,
    "mobilenet_v2_dynamic": None,
    "mobilenet_v3_small": None,
    "mobilenet_v3_large": None,
    "vgg11": None,
    "squeezenet1_0": None,
    "squeezenet1_1": None,
    "shufflenet_v2_x0_25": None,
    "shufflenet_v2_swish": None,
    "densenet121": None,
    "googlenet": None,
    "lenet": None,
    "alexnet": None,
    "transformer_relu": None,
    "transformer_gelu": None,
    # nn.LSTM sizes its zero initial states from shape(ids)[0]: conservative (see report).
    "text_classifier": "block 0, op 3 (shape): reads the batch size: its value depends on how "
    "many rows run together",
    # cond(mean(x) > 0, ...): one branch for the whole batch.
    "cond_with_different_shapes": "block 0, op 1 (reduce_mean): reduces over the batch dimension",
    "cond_returning_several_values": "block 0, op 2 (reduce_sum): reduces over the batch dimension",
    "while_until_values_converge": "block 0, op 3 (reduce_max): reduces over the batch dimension",
    # Scalar (0-D or [1]) feeds: a loop bound or a branch value, not rows.
    "cond_on_zero_d_values": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at "
    "axis 0 of feed 'k', got dims []",
    "nested_cond": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at axis 0 of "
    "feed 'a', got dims []",
    "nested_while": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at axis 0 of "
    "feed 'n', got dims []",
    "while_counting_to_n": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at "
    "axis 0 of feed 'n', got dims []",
    "while_growing_a_tensor": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at "
    "axis 0 of feed 'n', got dims []",
    "while_with_cond_in_body": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at "
    "axis 0 of feed 'n', got dims [1]",
}


def batchability() -> dict[str, str | None]:
    """Validates every program of the figure (built with real Paddle) and returns its coupling."""
    from tests.conformance import test_control_flow as control_flow
    from tests.conformance.models import MODELS
    from tests.conformance.paddle_util import Saved, build_and_save
    from tests.conformance.test_text_classifier import classifier

    programs: dict[str, Saved] = {name: make() for name, make in MODELS.items()}
    programs["text_classifier"] = classifier()
    for name in dir(control_flow):
        if name.startswith(("_cond", "_while", "_nested")):
            programs[name.strip("_")] = build_and_save(getattr(control_flow, name))
    found: dict[str, str | None] = {}
    for name, saved in programs.items():
        report = validate(saved.program, saved.params).report
        assert report.batchable == (report.batch_coupling is None)
        found[name] = report.batch_coupling
    return found


@pytest.mark.paddle
def test_batchability_of_the_conformance_programs() -> None:
    pytest.importorskip("tests.conformance.paddle_util")
    assert batchability() == BATCHABILITY


if __name__ == "__main__":  # the figure's table: python -m tests.validator.test_batchable
    import sys

    rows = batchability()
    sys.stdout.write(f"{sum(c is None for c in rows.values())} of {len(rows)} batchable\n")
    for program, coupling in rows.items():
        sys.stdout.write(
            f"| {program} | {'yes' if coupling is None else 'no'} | {coupling or ''} |\n"
        )
