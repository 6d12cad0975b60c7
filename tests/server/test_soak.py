"""Soak against a real `graphgate serve`: many requests at high concurrency across two tenants
answer no 5xx, and the resident memory of the server process and its workers does not grow
after warm-up (under `MAX_GROWTH`).

The default run is bounded (`SMALL`: 1,000 requests at 64 concurrency); the issue's size
(10,000) is behind the `soak` marker, and benchmarks/bench_soak.py writes its figures to
benchmarks/results/soak.md. Memory is read from /proc (VmRSS) for the server and every process
whose parent it is (the workers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.support.served import Server
from tests.support.soak import MAX_GROWTH, SOAK_ENV, Soak, SoakFigures, run_soak

SMALL: Final = Soak(requests=1000, concurrency=64)
FULL: Final = Soak(requests=10_000, concurrency=64)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path / "data", SOAK_ENV) as s:
        yield s


def _assert_steady(figures: SoakFigures, requests: int) -> None:
    assert sum(figures.statuses.values()) == requests
    assert [s for s in figures.statuses if s >= 500] == [], figures.statuses
    assert set(figures.statuses) == {200}, figures.statuses
    assert figures.pids_end == figures.pids_warm  # no worker died and was replaced
    assert figures.growth < MAX_GROWTH, (
        f"RSS {figures.rss_warm_bytes} -> {figures.rss_end_bytes} ({figures.growth:+.1%})"
    )


def test_1000_requests_at_64_concurrency_no_5xx_and_no_memory_growth(server: Server) -> None:
    _assert_steady(run_soak(server, SMALL), SMALL.requests)


@pytest.mark.soak
def test_10000_requests_at_64_concurrency_no_5xx_and_no_memory_growth(server: Server) -> None:
    _assert_steady(run_soak(server, FULL), FULL.requests)
