"""The batch-independence proof on whole programs: small hand-built ones, and the batchability
of every conformance model (the batching figure), pinned with the op that couples rows."""

from __future__ import annotations

import pytest

from graph_proto.types import DType
from tests.conformance.batchability import BATCHABILITY, batchability
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
