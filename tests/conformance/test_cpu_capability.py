"""A Paddle reference this CPU cannot run is a skip with the reason, never a failure of graphgate.

Paddle runs bfloat16 activations with oneDNN primitives that exist only for CPUs with AVX-512
(BF16) instructions. ONEDNN_MAX_CPU_ISA=AVX2 is oneDNN's own cap on the instructions it uses:
under it, the CPU running these tests lacks them as a CPU without AVX-512 does, whatever it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conformance.paddle_util import (
    NO_BFLOAT16,
    building,
    computes_in_bfloat16,
    paddle,
    run_paddle,
    save,
)

pytestmark = pytest.mark.paddle

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_AVX512 = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
PARITY = "tests/conformance/test_ops_parity.py::test_outputs_match_paddle"


def run_without_avx512(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT, env=WITHOUT_AVX512, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_probe_reports_onednn_refusing_bfloat16() -> None:
    probe = "from tests.conformance.paddle_util import bfloat16_refusal; print(bfloat16_refusal())"
    done = run_without_avx512("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        "could not create a primitive descriptor for an eltwise forward propagation primitive"
    )


def test_bfloat16_cases_skip_with_the_reason_and_float32_ones_still_run() -> None:
    done = run_without_avx512(
        "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
        f"{PARITY}[activation-relu/bfloat16]",
        f"{PARITY}[activation-softmax/bfloat16]",
        f"{PARITY}[activation-relu/functional]",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    reasons = {line.partition(".py:")[2].partition(": ")[2] for line in skipped}
    assert reasons == {
        f"{NO_BFLOAT16}: could not create a primitive descriptor for an eltwise forward "
        "propagation primitive",
        f"{NO_BFLOAT16}: could not create a primitive descriptor for a softmax forward "
        "propagation primitive",
    }, done.stdout
    assert "1 passed, 2 skipped" in done.stdout


def test_a_float32_program_is_not_taken_for_a_bfloat16_one() -> None:
    with building() as (main, startup):
        x = paddle.static.data("x", [2], "float32")
        out = paddle.nn.functional.relu(x)
    saved = save(main, startup, [x], [out])
    assert not computes_in_bfloat16(saved.program)
    (got,) = run_paddle(saved, {"x": np.array([-1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(got, [0.0, 2.0])
