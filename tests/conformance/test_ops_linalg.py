"""matmul_v2, legacy matmul and mul built by real Paddle: accepted, with the dims Paddle records.

CASES, in families/linalg.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from tests.conformance.families.linalg import mm
from tests.conformance.op_cases import binary
from tests.conformance.paddle_util import (
    assert_parity,
    build_and_save,
    random_feeds,
    recorded_types,
)
from validator import validate

pytestmark = pytest.mark.paddle


def test_matmul_v2_batch_dims_paddle_records_unbroadcast_run_broadcast() -> None:
    # NOTE: MatmulInferMeta copies the batch dims of the higher-rank operand; its kernel
    # broadcasts them like numpy (the output is [N, 7, 3, 5]), which is what graphgate infers
    # (the core treats the stored dims of an intermediate as advisory) and runs.
    saved = build_and_save(binary(mm, [-1, 1, 3, 4], [7, 4, 5]))
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, 1, 3, 5)
    validated = validate(saved.program, saved.params)
    assert validated.types[out].shape == (-1, 7, 3, 5)
    for batch in (1, 3):
        assert_parity(saved, random_feeds(validated, batch=batch))
