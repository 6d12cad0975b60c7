"""conv, pool and norm ops: programs Paddle builds are accepted, with the dims Paddle records.

CASES, in families/nn.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import SessionOptions
from executor import compile as compile_program
from executor.lower import EMITTERS
from tests.conformance.families.nn import LAYERS, layer_program, nn
from tests.conformance.op_cases import randomized
from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    dims_differences,
    random_feeds,
    recorded_types,
)
from validator import Policy, validate
from validator.ops import REGISTRY

pytestmark = pytest.mark.paddle


def test_conv2d_transpose_output_padding_on_unknown_size() -> None:
    """Paddle's compile-time rule adds output_padding to -1 and records 0; graphgate keeps -1."""
    saved = build_and_save(
        layer_program(
            lambda: nn.Conv2DTranspose(
                3, 6, 3, stride=2, padding=1, output_padding=1, bias_attr=False
            ),
            [-1, 3, -1, 5],
        )
    )
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, 6, 0, 10)
    assert validated.types[out].shape == (-1, 6, -1, 10)
    assert dims_differences(validated, saved.program, exempt=[out]) == []


@pytest.mark.skipif(
    not {"reshape2", "elementwise_add"} <= REGISTRY.names(),
    reason="needs reshape2, elementwise_add",
)
def test_conv2d_with_bias_matches_paddle() -> None:
    saved = build_and_save(layer_program(lambda: nn.Conv2D(3, 8, 1), [-1, 3, -1, -1]))
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


def test_group_norm_takes_unknown_channels_from_scale() -> None:
    saved = build_and_save(layer_program(lambda: nn.GroupNorm(2, 4), [-1, -1, 5, 5]))
    # NOTE: budgets bind every unknown non-batch feed dim to max_dynamic_dim, which must then
    # agree with Scale's 4 channels (a -1 channel constrained by parameters is reported).
    validated = validate(saved.program, saved.params, Policy(max_dynamic_dim=4))
    (out,) = saved.fetches
    assert validated.types[out].shape == (-1, 4, 5, 5)
    assert dims_differences(validated, saved.program) == []


def test_instance_norm_orphan_vars_with_dims_below_minus_one() -> None:
    # Paddle stores N*C = [-3] for the pruned statistics; stored intermediate dims are advisory.
    saved = build_and_save(layer_program(lambda: nn.InstanceNorm2D(3), [-1, 3, -1, -1]))
    assert sorted(d for _, d in recorded_types(saved.program).values() if d == (-3,)) == [(-3,)] * 2
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


def _assert_parity_at(saved: Saved, dynamics: tuple[int, ...]) -> None:
    """Parity at batch 1 and 3, each -1 spatial dim fed as each of `dynamics`."""
    saved = randomized(saved)
    validated = validate(saved.program, saved.params)
    for i, size in enumerate(dynamics):
        for batch in (1, 3):
            assert_parity(saved, random_feeds(validated, batch=batch, dynamic=size, seed=i))


def test_conv2d_transpose_output_padding_on_unknown_size_matches_paddle_numerically() -> None:
    def make() -> Any:
        return nn.Conv2DTranspose(3, 6, 3, stride=2, padding=1, output_padding=1, bias_attr=False)

    _assert_parity_at(build_and_save(layer_program(make, [-1, 3, -1, 5])), (5, 2))


@pytest.mark.skipif(
    not {"reshape2", "elementwise_add"} <= EMITTERS.keys(),
    reason="needs the reshape2 and elementwise_add lowerings",
)
def test_conv2d_with_bias_matches_paddle_numerically() -> None:
    _assert_parity_at(
        build_and_save(layer_program(lambda: nn.Conv2D(3, 8, 3), [-1, 3, -1, -1])), (5, 3)
    )


def test_batch_norm_without_scale_and_bias_matches_numpy() -> None:
    _, make, shape = LAYERS["batch_norm_no_affine"]
    saved = randomized(build_and_save(layer_program(make, shape)))
    validated = validate(saved.program, saved.params)
    (bn,) = [op for op in validated.ops if op.op_type == "batch_norm"]
    mean, var = (
        validated.params[bn.inputs[slot][0]].reshape(1, -1, 1, 1) for slot in ("Mean", "Variance")
    )
    feeds = random_feeds(validated, batch=2, dynamic=5)
    (got,) = compile_program(validated, SessionOptions(use_cuda=False)).run(feeds).values()
    expected = (feeds["x"] - mean) / np.sqrt(var + bn.attrs.epsilon)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_adaptive_pooling_on_dynamic_dims_is_exact_at_run_time() -> None:
    """Bins of an unknown input size are computed at run time, not taken from a guessed size."""
    saved = randomized(
        build_and_save(layer_program(lambda: nn.AdaptiveAvgPool2D((3, 5)), [-1, 3, -1, -1]))
    )
    validated = validate(saved.program, saved.params)
    for size in (1, 2, 3, 4, 8, 11, 16):
        assert_parity(saved, random_feeds(validated, batch=2, dynamic=size, seed=size))
