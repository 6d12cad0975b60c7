"""Fairness against a real `graphgate serve`: tenant A floods the server with checks of a large
program and with inference clients; tenant B's latency stays within a documented bound of its
idle latency.

The load runs in a process of its own (its client threads would otherwise share the measuring
client's interpreter lock). The default run is a bounded version (`SMALL`); the issue's full
size (40 checks and 64 inference clients) is behind the `soak` marker, and
benchmarks/bench_fairness.py writes its figures to benchmarks/results/fairness.md.

The bound: B's p99 under load at most `RATIO_BOUND` times its idle p99 plus a slack. The slack
covers what no queue in the server can remove on a 2-CPU machine: B's request shares the CPUs
with the load generator (on the same machine in CI) and with the server's event loop, which
answers every one of A's requests, refusals included (breakdown in
benchmarks/results/fairness.md); an idle p99 of a few milliseconds is too small a unit to scale
on its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.support.fairness import FULL, SLACK_MS, SMALL, Figures, measure_fairness
from tests.support.served import Server

# The default run's bounded version shares the 2 CPUs with the other xdist worker's tests too
# (measured there: B's p99 170 ms against an idle 8.8 ms): its bound catches starvation as well.
SHARED_CI_SLACK_MS: Final = 500.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path / "data") as s:
        yield s


def _assert_fair(figures: Figures, slack_ms: float = SLACK_MS) -> None:
    assert set(figures.b_statuses) == {200}, figures.b_statuses
    # A's flood did run: its inferences answered and its checks compiled
    assert figures.a_statuses.get("infer 200", 0) > 0, figures.a_statuses
    assert figures.a_statuses.get("check 200", 0) > 0, figures.a_statuses
    assert not [s for s in figures.a_statuses if not s.endswith((" 200", " 429", " 503"))], (
        figures.a_statuses
    )
    # NOTE: the model-list latency is reported (bench), not bounded: one sample in ten is too
    # few for a stable idle p99.
    assert figures.loaded_ms["p99"] <= figures.bound_ms(slack_ms), figures.summary()


def test_a_tenants_flood_keeps_another_tenants_p99_within_the_bound(server: Server) -> None:
    _assert_fair(measure_fairness(server, SMALL), SHARED_CI_SLACK_MS)


@pytest.mark.soak
def test_full_size_flood_keeps_another_tenants_p99_within_the_bound(server: Server) -> None:
    _assert_fair(measure_fairness(server, FULL))
