"""Deadlines, cancellation and the run-time budget of CompiledModel.run, in this process."""

from __future__ import annotations

import threading
import time
from typing import Final

import numpy as np
import pytest

from executor import CompiledModel, RunCancel, SessionOptions, compile
from executor.errors import DeadlineExceeded, RequestOverBudget, RunCancelled
from tests.support.builders import matmul_chain
from validator import Policy, validate


def _compiled(links: int, policy: Policy | None = None) -> CompiledModel:
    g = matmul_chain(links)
    validated = validate(g.program_bytes(), None, policy or Policy())
    return compile(validated, SessionOptions(use_cuda=False))


def _square(n: int) -> np.ndarray:
    return np.eye(n, dtype=np.float32)  # stays exact through any number of products


# A run of _compiled(200) at n=LONG_N is long: 10 s on this 2-CPU kind of machine when quiet,
# 79 s at a load average of 9. One stopped at a deadline or a cancel ends at its next node:
# 0.05-0.28 s late, measured at that load average. STOP_WITHIN_S is ten times that and still
# far below a run to the end. (At n=1024 the whole run took 1 s here: a bound could not tell.)
LONG_N: Final = 2048
STOP_WITHIN_S: Final = 3.0


def test_a_long_run_is_stopped_at_its_deadline_and_the_model_runs_the_next_request() -> None:
    model = _compiled(200)
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        model.run({"x": _square(LONG_N)}, deadline=start + 0.3)
    assert time.monotonic() - start < 0.3 + STOP_WITHIN_S  # stopped between nodes, not at the end
    small = model.run({"x": _square(4)}, deadline=time.monotonic() + 30)
    (out,) = small.values()
    np.testing.assert_allclose(out, np.eye(4), rtol=1e-6)


def test_a_deadline_already_past_runs_nothing() -> None:
    model = _compiled(1)
    with pytest.raises(DeadlineExceeded):
        model.run({"x": _square(4)}, deadline=time.monotonic() - 1)


def test_cancellation_stops_a_running_request() -> None:
    model = _compiled(200)
    cancel = RunCancel()
    threading.Timer(0.2, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(RunCancelled):
        model.run({"x": _square(LONG_N)}, cancel=cancel)
    assert time.monotonic() - start < 0.2 + STOP_WITHIN_S


def test_a_run_cancelled_before_it_starts_never_starts() -> None:
    model = _compiled(200)
    cancel = RunCancel()
    cancel.set()
    start = time.monotonic()
    with pytest.raises(RunCancelled):
        model.run({"x": _square(LONG_N)}, cancel=cancel)
    assert time.monotonic() - start < STOP_WITHIN_S  # not one node ran (0.3 ms measured)
    assert model.run({"x": _square(4)}, cancel=RunCancel())  # a fresh token: runs


def test_a_request_over_the_flops_budget_is_refused_with_its_figures_before_it_runs() -> None:
    # At upload (batch 32, other dims 64): 3 links x 2*64 x 32*64 FLOPs, 24.6k per sample.
    policy = Policy(max_flops_per_sample=10**6, max_dynamic_dim=64)
    model = _compiled(3, policy)
    assert model.run({"x": _square(8)})  # 3 x 2 x 8^3 FLOPs over 8 samples: within 8e6
    # n=1000: 3 links x 2 x 1000^3 = 6.0e9 FLOPs; the cap is 1e6 per sample x 1000 samples.
    with pytest.raises(RequestOverBudget, match=r"expected at most 1\.0e\+09 FLOPs, got 6\.0e\+09"):
        model.run({"x": _square(1000)})
