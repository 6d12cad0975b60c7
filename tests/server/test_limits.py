"""Per-tenant rate and concurrency limits: the limiters alone, through the app, over the wire."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from server.main import create_app
from server.services.limits import (
    ConcurrencyLimiter,
    Limits,
    RateLimited,
    RateLimiter,
    TooManyConcurrent,
)
from tests.support.api import ADMIN_TOKEN, assert_error, auth, new_tenant, post_tenant
from tests.support.backends import SettingsFactory
from tests.support.served import Server
from tests.support.uploads import post_model, upload

X = np.arange(8, dtype=np.float32).reshape(2, 4)
INFER = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": X.ravel().tolist()}]}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- the limiters alone --------------------------------------------------------------------


def test_bucket_allows_the_burst_then_waits_for_the_rate() -> None:
    clock = FakeClock()
    rate = RateLimiter(2, 2, clock)
    assert rate.wait_s("a") == 0 and rate.wait_s("a") == 0
    assert rate.wait_s("a") == pytest.approx(0.5)
    clock.advance(0.25)
    assert rate.wait_s("a") == pytest.approx(0.25)  # half a token is back, not a whole one
    clock.advance(0.25)
    assert rate.wait_s("a") == 0


def test_retry_after_is_whole_seconds_from_the_bucket() -> None:
    clock = FakeClock()
    rate = RateLimiter(0.25, 1, clock)  # one token every 4 s
    rate.take("a")
    with pytest.raises(RateLimited) as first:
        rate.take("a")
    assert first.value.retry_after_s == 4 and first.value.code == "RATE_LIMITED"
    clock.advance(1.5)
    with pytest.raises(RateLimited) as later:
        rate.take("a")
    assert later.value.retry_after_s == 3  # 2.5 s to go, rounded up
    clock.advance(2.5)
    rate.take("a")

    fast = RateLimiter(1000, 1, clock)
    fast.take("a")
    with pytest.raises(RateLimited) as soon:
        fast.take("a")
    assert soon.value.retry_after_s == 1  # a 1 ms wait is still at least 1 s


def test_an_idle_bucket_saves_at_most_the_burst() -> None:
    clock = FakeClock()
    rate = RateLimiter(10, 3, clock)
    assert [rate.wait_s("a") == 0 for _ in range(3)] == [True] * 3
    clock.advance(3600)
    taken = [rate.wait_s("a") == 0 for _ in range(5)]
    assert taken == [True, True, True, False, False]


def test_each_key_has_its_own_bucket() -> None:
    rate = RateLimiter(1, 1, FakeClock())
    rate.take("a")
    with pytest.raises(RateLimited):
        rate.take("a")
    rate.take("b")


def test_zero_rate_and_zero_concurrency_are_unlimited() -> None:
    rate = RateLimiter(0, 1, FakeClock())
    for _ in range(10_000):
        rate.take("a")
    slots = ConcurrencyLimiter(0)
    for _ in range(1000):
        slots.acquire("a")
    assert slots.in_flight("a") == 1000


def test_bad_limiter_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="expected rate >= 0 and burst >= 1"):
        RateLimiter(5, 0)
    with pytest.raises(ValueError, match="expected a concurrency limit >= 0"):
        ConcurrencyLimiter(-1)


def test_concurrency_slots_per_key_and_released_on_errors() -> None:
    slots = ConcurrencyLimiter(1)
    with slots.slot("a"):
        with pytest.raises(TooManyConcurrent) as refused:
            slots.acquire("a")
        assert refused.value.retry_after_s == 1 and refused.value.code == "TOO_MANY_CONCURRENT"
        with slots.slot("b"):
            assert slots.in_flight("b") == 1
    with pytest.raises(ZeroDivisionError), slots.slot("a"):
        _ = 1 / 0
    assert slots.in_flight("a") == 0
    with pytest.raises(RuntimeError, match="release without acquire"):
        slots.release("a")


def test_bucket_hands_out_exactly_the_burst_across_threads() -> None:
    rate = RateLimiter(1, 100, FakeClock())  # a frozen clock: no refill during the race
    granted = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def hammer() -> None:
        start.wait()
        mine = sum(rate.wait_s("a") == 0 for _ in range(50))
        with lock:
            granted.append(mine)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 100


def test_concurrency_never_exceeds_the_limit_across_threads() -> None:
    slots = ConcurrencyLimiter(3)
    peak, refused = [0], [0]
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        for _ in range(300):
            try:
                with slots.slot("a"), lock:
                    peak[0] = max(peak[0], slots.in_flight("a"))
            except TooManyConcurrent:
                with lock:
                    refused[0] += 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= peak[0] <= 3
    assert slots.in_flight("a") == 0


# -- through the app -----------------------------------------------------------------------


def _app(make: SettingsFactory, rate_per_s: float = 200.0, burst: int = 400) -> TestClient:
    settings = make(tenant_rate_per_s=rate_per_s, tenant_rate_burst=burst)
    return TestClient(create_app(settings))


def _tenant_id(client: TestClient, key: str) -> str:
    tenant_id: str = client.app.state.tenants.authenticate(key).tenant_id  # type: ignore[attr-defined]
    return tenant_id


def _infer(client: TestClient, key: str, name: str = "m") -> httpx2.Response:
    return client.post(f"/v2/models/{name}/infer", json=INFER, headers=auth(key))


@pytest.fixture
def two_tenants(make_settings: SettingsFactory) -> Iterator[tuple[TestClient, str, str]]:
    """An app where tenants a and b each have model m; limits are set by each test."""
    with _app(make_settings) as client:
        key_a, key_b = new_tenant(client, "tenant-a"), new_tenant(client, "tenant-b")
        upload(client, key_a)
        upload(client, key_b)
        yield client, key_a, key_b


def test_third_immediate_request_is_429_and_other_tenants_are_not_throttled(
    two_tenants: tuple[TestClient, str, str],
) -> None:
    client, key_a, key_b = two_tenants
    clock = FakeClock()
    client.app.state.limits = Limits.build(2, 2, 32, clock)  # type: ignore[attr-defined]
    assert _infer(client, key_a).status_code == 200
    assert _infer(client, key_a).status_code == 200
    refused = _infer(client, key_a)
    assert_error(refused, 429, "RATE_LIMITED")
    assert refused.headers["retry-after"] == "1"
    assert "expected at most 2 requests per second (burst 2)" in refused.json()["error"]
    # /v1 routes share the tenant's bucket
    assert_error(client.get("/v1/models", headers=auth(key_a)), 429, "RATE_LIMITED")
    for _ in range(2):
        assert _infer(client, key_b).status_code == 200
    for _ in range(5):  # admin keys are not rate limited
        assert client.get("/v1/admin/tenants", headers=auth(ADMIN_TOKEN)).status_code == 200
    clock.advance(0.5)
    assert _infer(client, key_a).status_code == 200


def test_settings_set_the_rate_and_retry_after_comes_from_the_bucket(
    make_settings: SettingsFactory,
) -> None:
    with _app(make_settings, rate_per_s=0.01, burst=2) as client:
        key = new_tenant(client, "tenant-a")
        assert client.get("/v1/models", headers=auth(key)).status_code == 200
        assert client.get("/v1/models", headers=auth(key)).status_code == 200
        refused = client.get("/v1/models", headers=auth(key))
        assert_error(refused, 429, "RATE_LIMITED")
        # one token takes 100 s at 0.01/s; the seconds the test has run already count
        assert 90 <= int(refused.headers["retry-after"]) <= 100
        # a wrong key is 401 before any bucket is touched
        assert_error(client.get("/v1/models", headers=auth("gg_bad")), 401, "UNAUTHORIZED")


def test_concurrency_limit_is_429_with_retry_after_1_for_that_tenant_only(
    two_tenants: tuple[TestClient, str, str],
) -> None:
    client, key_a, key_b = two_tenants
    client.app.state.limits = Limits.build(0, 1, 1)  # type: ignore[attr-defined]
    limits: Limits = client.app.state.limits  # type: ignore[attr-defined]
    with limits.concurrency.slot(_tenant_id(client, key_a)):  # a request of a is in flight
        refused = _infer(client, key_a)
        assert_error(refused, 429, "TOO_MANY_CONCURRENT")
        assert refused.headers["retry-after"] == "1"
        assert _infer(client, key_b).status_code == 200
        # only inference is capped: the tenant's other routes still answer
        assert client.get("/v2/models/m", headers=auth(key_a)).status_code == 200
    assert _infer(client, key_a).status_code == 200


def test_slots_are_released_whatever_the_outcome(two_tenants: tuple[TestClient, str, str]) -> None:
    client, key_a, _ = two_tenants
    client.app.state.limits = Limits.build(0, 1, 1)  # type: ignore[attr-defined]
    limits: Limits = client.app.state.limits  # type: ignore[attr-defined]
    assert _infer(client, key_a).status_code == 200
    bad = client.post("/v2/models/m/infer", content=b"{", headers=auth(key_a))
    assert_error(bad, 400, "INFER_MALFORMED")
    assert_error(_infer(client, key_a, "nope"), 404, "NOT_FOUND")
    assert _infer(client, key_a).status_code == 200
    assert limits.concurrency.in_flight(_tenant_id(client, key_a)) == 0


def test_parallel_requests_over_the_limit_get_429_and_leave_no_slot_held(
    two_tenants: tuple[TestClient, str, str],
) -> None:
    client, key_a, _ = two_tenants
    client.app.state.limits = Limits.build(0, 1, 2)  # type: ignore[attr-defined]
    limits: Limits = client.app.state.limits  # type: ignore[attr-defined]
    statuses: list[int] = []
    lock = threading.Lock()

    def send() -> None:
        for _ in range(10):
            status = _infer(client, key_a).status_code
            with lock:
                statuses.append(status)

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(statuses) <= {200, 429} and 200 in statuses
    assert limits.concurrency.in_flight(_tenant_id(client, key_a)) == 0


# -- a real `graphgate serve` --------------------------------------------------------------


def test_serve_reads_limits_from_the_environment_and_counts_429s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend_env: dict[str, str]
) -> None:
    monkeypatch.setenv("GRAPHGATE_TENANT_RATE_PER_S", "0.01")
    monkeypatch.setenv("GRAPHGATE_TENANT_RATE_BURST", "2")
    server = Server(tmp_path / "data", backend_env)
    server.start()
    try:
        key = post_tenant(server, "acme")
        uploaded = post_model(server, key)
        assert uploaded.status_code == 201, uploaded.text
        assert (
            httpx2.post(
                f"{server.url}/v2/models/m/infer", json=INFER, headers=auth(key)
            ).status_code
            == 200
        )
        refused = httpx2.post(f"{server.url}/v2/models/m/infer", json=INFER, headers=auth(key))
        assert_error(refused, 429, "RATE_LIMITED")
        assert 90 <= int(refused.headers["retry-after"]) <= 100

        text = httpx2.get(f"{server.url}/metrics", headers=auth(ADMIN_TOKEN)).text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        throttled = ("graphgate_throttled_requests_total", (("reason", "rate"), ("tenant", "acme")))
        assert samples[throttled] == 1
        refused_key = (
            "graphgate_inference_requests_total",
            (("model", ""), ("protocol", "json"), ("status", "429"), ("tenant", "acme")),
        )
        assert samples[refused_key] == 1
    finally:
        server.stop()
