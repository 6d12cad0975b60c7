"""Fairness against a real `graphgate serve`: tenant A floods the server with checks of a large
program and with inference clients; tenant B goes on being served, and its inferences never wait
their turn behind A's checks.

The load runs in a process of its own (its client threads would otherwise share the measuring
client's interpreter lock); the load and the measuring are tests/support/fairness.py's, shared
with benchmarks/bench_fairness.py. The default run is a bounded version (`SMALL`); the issue's
full size (40 checks and 64 inference clients) is behind the `soak` marker.

The tests check progress and order, not time: every one of B's requests is answered 200 while
A's flood runs (A's inferences and checks are answered too), and A's checks answered in the
whole flood are far fewer than B's inferences answered in part of it. A queue in front of B
(compiles holding every worker: B's p99 was 6 s) makes each of B's requests wait for one of A's
compiles at least; with the workers shared fairly, B's inference takes milliseconds and a
compile of A's large program a few hundred, so few of A's checks finish for B's many requests
(8-10 against 150 in four runs on a 2-CPU machine at load averages of 4 to 11; load slows
both). B's latency itself, its p99 under A's flood against its idle p99 in the same run (the
goal: `RATIO_BOUND` times plus `SLACK_MS`), is measured by benchmarks/bench_fairness.py and
written to benchmarks/results/fairness.md: a loaded machine moves it 2-5x from run to run,
which no test bound can tell from the server's own cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.support.fairness import FULL, SMALL, Figures, Load, measure_fairness
from tests.support.served import Server

# The order the tests check: at most this many of A's checks answered per B inference: ten times
# the 0.05-0.07 measured (module docstring). B starved waits for a compile per request at least:
# with compiles let onto every worker (server/services/limits.py `compile_threads`), 163 of A's
# checks were answered for B's 150 inferences.
CHECKS_PER_B_INFERENCE: Final = 0.65


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path / "data") as s:
        yield s


def _assert_fair(figures: Figures, load: Load) -> None:
    """Progress and order (module docstring); the latency figures are the benchmark's."""
    answered = load.samples + len(range(0, load.samples, 10))  # and a model list every tenth
    assert figures.b_statuses == {200: answered}, figures.b_statuses
    # A's flood did run: its inferences answered and its checks compiled
    assert figures.a_statuses.get("infer 200", 0) > 0, figures.a_statuses
    assert figures.a_statuses.get("check 200", 0) > 0, figures.a_statuses
    assert not [s for s in figures.a_statuses if not s.endswith((" 200", " 429", " 503"))], (
        figures.a_statuses
    )
    # B never waited its turn behind A's compiles (CHECKS_PER_B_INFERENCE)
    assert figures.a_statuses["check 200"] < CHECKS_PER_B_INFERENCE * load.samples, (
        figures.summary()
    )


def test_another_tenant_is_served_through_a_flood_ahead_of_its_checks(server: Server) -> None:
    _assert_fair(measure_fairness(server, SMALL), SMALL)


@pytest.mark.soak
def test_another_tenant_is_served_through_a_full_size_flood_ahead_of_its_checks(
    server: Server,
) -> None:
    _assert_fair(measure_fairness(server, FULL), FULL)
