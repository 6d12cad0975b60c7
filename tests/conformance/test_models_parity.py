"""Whole models: graphgate's outputs equal Paddle's Executor running the saved inference model.

Each model is conditioned like a trained network first (models.calibrated): at Paddle's default
init the activations of deep models grow to ~1000 or vanish to ~1e-18, where a float32
comparison within rtol 1e-4 and atol 1e-5 says nothing (or nothing can pass it).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import CompiledModel, SessionOptions, compile
from graph_proto import framework_pb2 as pb
from tests.conformance import models
from tests.conformance.models import MODELS, calibrated
from tests.conformance.paddle_util import Saved, random_feeds, run_paddle
from validator import validate

pytestmark = pytest.mark.paddle

RTOL: Final = 1e-4
ATOL: Final = 1e-5
# (batch, size of every other -1 dim, seed): batch 1 and batch > 1, and two sizes, so that
# mobilenet_v2_dynamic runs at two image sizes and the transformers at two sequence lengths.
CASES: Final = ((1, 32, 0), (3, 48, 1))
VOCABULARY: Final = 100  # the transformers' Embedding(100, 16): ids anywhere in it

# Models still over the tolerance after calibration: name -> why. They run every other check;
# the float comparison then ends in an xfail that shows the measured worst |diff| / tolerance,
# and fails once the model is within tolerance (remove it from here then). Not lowering bugs:
# fetching every intermediate from both sides (batch 3) shows no op adding more than float32
# rounding, and each batch_norm amplifying the relative difference (its mean subtraction leaves
# the rounding error of the mean behind) by the factor given, over the count given. Both
# runtimes differ from themselves by a like amount: onnxruntime with graph optimizations off
# against on, and Paddle with the input moved by one ulp.
_BN_CHAIN = (
    "float32 rounding through {n} batch_norms, each amplifying it ~{gain}x; onnxruntime differs "
    "from itself by {ort}x the tolerance (graph optimizations off vs on), Paddle by {paddle}x "
    "(input moved by one ulp)"
)
OVER_TOLERANCE: Final[dict[str, str]] = {
    "mobilenet_v1": _BN_CHAIN.format(n=27, gain=1.19, ort=4.4, paddle=3.7),
    "shufflenet_v2_x0_25": _BN_CHAIN.format(n=56, gain=1.13, ort=3.6, paddle=3.9),
    "densenet121": _BN_CHAIN.format(n=121, gain=1.31, ort=1.3, paddle=0.7),
}


def _compiled(saved: Saved) -> CompiledModel:
    return compile(validate(saved.program, saved.params), SessionOptions(use_cuda=False))


def _worst_ratio(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| / (atol + rtol |expected|): at most 1 within the tolerance."""
    return float((np.abs(got - expected) / (ATOL + RTOL * np.abs(expected))).max())


@pytest.mark.parametrize("name", list(MODELS))
def test_outputs_equal_paddles(name: str) -> None:
    saved = calibrated(name)
    model = _compiled(saved)
    ratios: list[str] = []
    worst = 0.0
    for batch, size, seed in CASES:
        feeds = random_feeds(
            model.program, batch=batch, dynamic=size, int_high=VOCABULARY, seed=seed
        )
        ours = model.run(feeds)
        assert list(ours) == saved.fetches  # by Paddle var name, in fetch order
        for fetch, expected in zip(saved.fetches, run_paddle(saved, feeds), strict=True):
            got, case = ours[fetch], f"{fetch} at batch {batch}, size {size}"
            assert (got.shape, got.dtype) == (expected.shape, expected.dtype), case
            if not np.issubdtype(expected.dtype, np.floating):
                np.testing.assert_array_equal(got, expected, err_msg=case)
                continue
            # The comparison means something only if the outputs depend on the input by far
            # more than the tolerance (a calibrated model must not have forgotten its input).
            if batch > 1:
                spread = float(np.abs(expected - expected[:1]).max())
                assert spread > 100 * ATOL, f"{case}: outputs vary by {spread} across the batch"
            ratio = _worst_ratio(got, expected)
            ratios.append(f"{case}: {ratio:.3g}")
            worst = max(worst, ratio)
    if name in OVER_TOLERANCE:
        assert worst > 1, f"{name} is within tolerance now: remove it from OVER_TOLERANCE"
        pytest.xfail(f"worst |diff|/tol {worst:.2f}: {OVER_TOLERANCE[name]}")
    assert worst <= 1, f"{name}: worst |diff| / (atol + rtol |paddle|) per fetch:\n" + "\n".join(
        ratios
    )


def test_googlenet_fetches_its_three_heads() -> None:
    assert len(calibrated("googlenet").fetches) == 3


def test_calibrated_batch_norms_normalise_their_inputs() -> None:
    """On the calibration images every batch_norm's input has the calibrated per-channel mean and
    variance, so its output has mean 0 and variance var / (var + epsilon) (mobilenet_v1: no
    batch_norm ends a residual branch, every Scale stays 1)."""
    saved = calibrated("mobilenet_v1")
    validated = validate(saved.program, saved.params)
    norms = [op for op in validated.ops if op.op_type == "batch_norm"]
    feeds = models.calibration_feeds(saved, models.BATCH_NORM_CALIBRATION_BATCH)
    outputs = models.fetch(saved, feeds, [op.outputs["Y"][0] for op in norms])
    assert len(norms) == 27
    for op, y in zip(norms, outputs, strict=True):
        variance = validated.params[op.inputs["Variance"][0]]
        assert np.abs(y.mean(axis=(0, 2, 3))).max() < 1e-3, op.outputs["Y"][0]
        np.testing.assert_allclose(
            y.var(axis=(0, 2, 3)), variance / (variance + 1e-5), rtol=1e-3, atol=1e-6
        )
        assert validated.params[op.inputs["Scale"][0]].tolist() == [1] * len(variance)


def test_normalized_convolutions_have_unit_rms_outputs() -> None:
    saved = calibrated("lenet")
    program = pb.ProgramDesc.FromString(saved.program)
    outputs = [op.outputs[0].arguments[0] for op in program.blocks[0].ops if op.type == "conv2d"]
    assert [op.outputs[0].parameter for op in program.blocks[0].ops if op.type == "conv2d"] == [
        "Output"
    ] * 2
    feeds = models.calibration_feeds(saved, models.CONV_CALIBRATION_BATCH, size=28)
    rms = [float(np.sqrt(np.mean(np.square(v)))) for v in models.fetch(saved, feeds, outputs)]
    np.testing.assert_allclose(rms, [1, 1], rtol=1e-5)
