"""The dynamic batcher (server/dispatch/batching.py) against real worker processes.

Which programs batch is the validator's batch-independence proof (`report.batchable`): the
equality test runs conformance models the proof marks batchable (tests/conformance/
batchability.py's BATCHABILITY), through the server's own `Batchers`. TEST-ONLY OVERRIDE
(`assume_batchable`) only where a test needs a program the proof refuses.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import numpy as np
import pytest
from fastapi.testclient import TestClient

from executor import SessionOptions, session_device
from server.dispatch import Cancel, PoolSettings, RemoteModel, WorkerPool
from server.dispatch.batching import (
    CLEAR_FIXED,
    MAX_RECHECK_RUNS,
    RECHECK_RUNS,
    Batcher,
    Batchers,
    BatchPolicy,
    BatchSizes,
    RowCost,
    batch_cap,
    proven_batchable,
)
from server.main import create_app
from server.settings import Settings
from tests.conformance import models
from tests.conformance.batchability import BATCHABILITY
from tests.conformance.paddle_util import Saved
from tests.support.api import ADMIN_TOKEN, auth, new_tenant
from tests.support.backends import SettingsFactory
from tests.support.builders import FP32, Built, GraphBuilder, V
from tests.support.uploads import upload
from validator import Policy, Report

LABEL = ("tenant", "model", 1)
# Proven batchable (BATCHABILITY), and small enough to run in CI's default set.
PROVEN: dict[str, Callable[[], Saved]] = {
    "lenet": models.lenet,
    "squeezenet1_1": models.squeezenet1_1,
    "mobilenet_v2": models.mobilenet_v2,
}


def assume_batchable(report: Report) -> bool:
    """TEST-ONLY OVERRIDE of `proven_batchable`: for programs the proof refuses."""
    return True


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    pool = WorkerPool(PoolSettings(workers=2))
    pool.start()
    yield pool
    pool.stop()


def _remote(pool: WorkerPool, program: bytes, params: bytes | None) -> RemoteModel:
    options = SessionOptions(use_cuda=False, intra_op_threads=1)
    return pool.compile(program, params, Policy(), options, lambda: (program, params))


def _fc() -> GraphBuilder:
    """y = x @ w over x[-1, 16], w[-1 would couple rows, so a fixed 16x4 feed per row]:
    here w is [16, 4] and fed; it has no batch axis, so this model must NOT batch."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, 16])
    w = g.feed("w", FP32, [16, 4])
    g.node(
        "matmul_v2",
        {"X": [x], "Y": [w]},
        {"Out": [V("y", [-1, 4])]},
        {"trans_x": False, "trans_y": False},
    )
    g.fetch("y")
    return g


def _relu() -> GraphBuilder:
    """y = relu(x) over x[-1, 16]: row-independent by construction."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, 16])
    g.node("relu", {"X": [x]}, {"Out": [V("y", [-1, 16])]}, {})
    g.fetch("y")
    return g


def _images(saved_inputs: int, rows: int, size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, saved_inputs, size, size), dtype=np.float32)


@pytest.mark.parametrize("name", sorted(PROVEN))
def test_batched_equals_unbatched(pool: WorkerPool, name: str) -> None:
    saved = PROVEN[name]()
    remote = _remote(pool, saved.program, saved.params)
    assert BATCHABILITY[name] is None and proven_batchable(remote.program.report)
    spec = remote.program.inputs[0]
    channels, size = spec.dims[1], spec.dims[2]
    # Requests of 1, 2 and 3 rows: concatenated into batches, split back.
    requests = [
        {spec.name: _images(channels, rows, size, seed)}
        for seed, rows in enumerate([1, 2, 3, 1, 2, 1, 1, 3])
    ]
    alone = [remote.run(feeds) for feeds in requests]
    batchers = Batchers(BatchPolicy(max_batch=8, max_queue_delay_us=200_000), slots=1)
    batcher = batchers.for_model(remote, LABEL)  # the server's choice: by the proof
    assert batcher is not None
    try:
        with batcher._cond:  # every request queued before the dispatcher looks
            futures = [batcher.submit(f, _same, source=str(i)) for i, f in enumerate(requests)]
        together = [f.result(60) for f in futures]
    finally:
        batchers.close()
    assert batcher.batches < len(requests), "the requests were expected to share batches"
    for single, batched in zip(alone, together, strict=True):
        assert single.keys() == batched.keys()
        for out in single:
            assert batched[out].shape == single[out].shape
            np.testing.assert_allclose(batched[out], single[out], rtol=1e-5, atol=1e-6)


def test_round_robin_across_sources(pool: WorkerPool) -> None:
    """A source that queued 12 requests fills at most its share of each batch."""
    program = _relu().program_bytes()
    remote = _remote(pool, program, None)
    batcher = Batcher(remote, LABEL, BatchPolicy(max_batch=4, max_queue_delay_us=200_000), 1)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 16), dtype=np.float32)} for _ in range(14)]
    try:
        with batcher._cond:
            flood = [batcher.submit(f, _same, source="flood") for f in feeds[:12]]
            other = [batcher.submit(f, _same, source="other") for f in feeds[12:]]
        results = [f.result(60) for f in [*flood, *other]]
    finally:
        batcher.close()
    first = batcher.recent[0]
    assert sorted(first) == ["flood", "flood", "other", "other"]
    for f, result in zip(feeds, results, strict=True):
        np.testing.assert_allclose(result["y"], np.maximum(f["x"], 0), rtol=1e-6)


def test_different_non_batch_dims_never_share_a_batch(pool: WorkerPool) -> None:
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, -1])
    g.node("relu", {"X": [x]}, {"Out": [V("y", [-1, -1])]}, {})
    g.fetch("y")
    remote = _remote(pool, g.program_bytes(), None)
    batcher = Batcher(remote, LABEL, BatchPolicy(max_batch=8, max_queue_delay_us=100_000), 1)
    a = {"x": -np.ones((2, 3), dtype=np.float32)}
    b = {"x": np.ones((1, 5), dtype=np.float32)}
    try:
        with batcher._cond:
            futures = [batcher.submit(f, _same, source="s") for f in (a, b, a, b)]
        results = [f.result(60) for f in futures]
    finally:
        batcher.close()
    assert [r["y"].shape for r in results] == [(2, 3), (1, 5), (2, 3), (1, 5)]
    assert np.array_equal(results[1]["y"], np.ones((1, 5), dtype=np.float32))
    assert all(len(set(_shapes(batch))) <= 1 for batch in batcher.recent) or batcher.batches == 2


def _shapes(sources: tuple[str, ...]) -> tuple[str, ...]:
    return sources


def test_one_bad_request_fails_alone(pool: WorkerPool) -> None:
    """A request over the request-bytes cap fails with its own error; the requests queued
    with it are answered (a batch never holds more than the cap)."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, 4])
    g.node("relu", {"X": [x]}, {"Out": [V("y", [-1, 4])]}, {})
    g.fetch("y")
    program = g.program_bytes()
    options = SessionOptions(use_cuda=False, max_request_bytes=100)
    remote = pool.compile(program, None, Policy(), options, lambda: (program, None))
    batcher = Batcher(remote, LABEL, BatchPolicy(max_batch=16, max_queue_delay_us=100_000), 1)
    good = {"x": -np.ones((2, 4), dtype=np.float32)}  # 32 bytes
    too_big = {"x": np.ones((30, 4), dtype=np.float32)}  # 480 bytes: over the cap alone
    try:
        with batcher._cond:
            futures = [batcher.submit(f, _same, source="s") for f in (good, too_big, good)]
        outcomes: list[object] = []
        for future in futures:
            try:
                outcomes.append(future.result(60)["y"])
            except Exception as error:
                outcomes.append(type(error).__name__)
    finally:
        batcher.close()
    for answered in (outcomes[0], outcomes[2]):
        assert isinstance(answered, np.ndarray)
        assert np.array_equal(answered, np.zeros((2, 4), dtype=np.float32))
    assert outcomes[1] == "InputTooLarge"


def test_cancelled_while_queued_fails_at_once(pool: WorkerPool) -> None:
    remote = _remote(pool, _relu().program_bytes(), None)
    batcher = Batcher(remote, LABEL, BatchPolicy(max_batch=64, max_queue_delay_us=5_000_000), 1)
    cancel = Cancel()
    try:
        future: Future[object] = batcher.submit(
            {"x": np.ones((1, 16), dtype=np.float32)}, _same, source="s", cancel=cancel
        )
        threading.Timer(0.05, cancel.set).start()
        with pytest.raises(Exception) as caught:
            future.result(2.0)  # long before the 5 s queue delay
    finally:
        batcher.close()
    assert type(caught.value).__name__ == "RunCancelled"


def test_a_batch_leaves_no_reference_cycle(pool: WorkerPool) -> None:
    """Every request's objects are freed when it is answered, without the garbage collector:
    a cycle per request made its full collections pause the event loop for ~100 ms under
    load (the p99 of busy serving)."""
    remote = _remote(pool, _relu().program_bytes(), None)
    batcher = Batcher(remote, LABEL, BatchPolicy(max_batch=4, max_queue_delay_us=200_000), 1)
    cancels = [Cancel() for _ in range(4)]
    alive = [weakref.ref(cancel) for cancel in cancels]
    gc.disable()
    try:
        with batcher._cond:  # all four queued before the batch thread looks: one batch
            futures = [
                batcher.submit({"x": np.ones((1, 16), np.float32)}, _same, cancel=cancel)
                for cancel in cancels
            ]
        assert all(f.result(60)["y"].shape == (1, 16) for f in futures)
        batcher.close()  # its thread ends, and with it its last batch
        assert batcher.batches == 1
        del cancels, futures
        assert [ref() for ref in alive] == [None] * 4
    finally:
        gc.enable()
        batcher.close()


def test_only_proven_programs_batch(pool: WorkerPool) -> None:
    relu = _remote(pool, _relu().program_bytes(), None)
    fixed_weight = _remote(pool, _fc().program_bytes(), None)
    default = Batchers(BatchPolicy(), slots=1)
    forced = Batchers(BatchPolicy(), slots=1, batchable=assume_batchable)
    try:
        # relu is row-independent: proven, it batches by default
        assert proven_batchable(relu.program.report) is True
        assert default.for_model(relu, LABEL) is not None
        # w[16, 4] has no batch axis: the proof refuses it, so it does not batch by default...
        assert proven_batchable(fixed_weight.program.report) is False
        assert default.for_model(fixed_weight, LABEL) is None
        # ...and, forced past the proof, still never: it cannot be concatenated
        assert forced.for_model(fixed_weight, LABEL) is None
        # A version's own policy: max batch 1 turns batching off for it alone.
        off = {"max_batch_size": 1, "max_queue_delay_us": 0, "preferred_batch_sizes": []}
        assert default.for_model(relu, LABEL, off) is None
        assert default.for_model(relu, ("tenant", "model", 2)) is not None
    finally:
        default.close()
        forced.close()


def _same(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return outputs


# A batch budget (GRAPHGATE_BATCH_MAX_RUN_MS, in seconds) that no run of these tests reaches.
LOAD_PROOF_S = 60.0

# -- through the HTTP server -----------------------------------------------------------------


def _relu_built() -> Built:
    return Built(_relu().program_bytes(), None)


def test_http_requests_batch_and_metadata_says_so(client: TestClient) -> None:
    state = client.app.state  # type: ignore[attr-defined]
    state.batchers.close()
    # relu is proven batchable; a 200 ms delay makes concurrent requests meet.
    # A budget no run reaches: a loaded machine's slow runs never cap these batches at one row
    # (the cap has tests of its own below).
    state.batchers = Batchers(
        BatchPolicy(max_batch=8, max_queue_delay_us=200_000), slots=1, max_run_s=LOAD_PROOF_S
    )
    key = new_tenant(client, "acme")
    upload(client, key, "relu", _relu_built())
    meta = client.get("/v2/models/relu", headers=auth(key)).json()
    assert meta["parameters"]["dynamic_batching"] == {
        "max_batch_size": 8,
        "max_queue_delay_us": 200_000,
        "preferred_batch_sizes": [],
    }
    rng = np.random.default_rng(7)
    rows = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(6)]
    answers: list[list[float]] = [[] for _ in rows]

    def ask(i: int) -> None:
        body = {
            "inputs": [
                {
                    "name": "x",
                    "shape": [1, 16],
                    "datatype": "FP32",
                    "data": rows[i].ravel().tolist(),
                }
            ]
        }
        response = client.post("/v2/models/relu/infer", json=body, headers=auth(key))
        assert response.status_code == 200, response.text
        answers[i] = response.json()["outputs"][0]["data"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(rows))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for row, answer in zip(rows, answers, strict=True):
        np.testing.assert_allclose(answer, np.maximum(row.ravel(), 0), rtol=1e-6)
    (batcher,) = state.batchers._batchers.values()
    assert batcher.batches < len(rows)
    # The batch sizes achieved, in /metrics: every row counted once, fewer runs than requests.
    sizes = _batch_size_samples(client.get("/metrics", headers=auth(ADMIN_TOKEN)).text)
    labels = 'model="relu",tenant="acme",version="1"'
    assert sizes[f"graphgate_batch_size_sum{{{labels}}}"] == len(rows)
    runs = sizes[f"graphgate_batch_size_count{{{labels}}}"]
    assert 1 <= runs < len(rows)
    buckets = [sizes[f'graphgate_batch_size_bucket{{le="{le}",{labels}}}'] for le in BUCKETS]
    assert buckets == sorted(buckets) and buckets[-1] == runs  # cumulative, +Inf holds all
    assert buckets[0] < runs  # at least one run held more than one row


BUCKETS = ["1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "+Inf"]


def _batch_size_samples(exposition: str) -> dict[str, float]:
    """`name{labels}` -> value of every graphgate_batch_* sample (labels sorted)."""
    samples = {}
    for line in exposition.splitlines():
        if line.startswith("graphgate_batch_"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_a_request_held_in_the_queue_past_its_deadline_is_a_504(client: TestClient) -> None:
    """The route's deadline holds while a request waits for a batch (the event loop's timer),
    and the batcher then drops it instead of running it."""
    state = client.app.state  # type: ignore[attr-defined]
    state.batchers.close()
    # A 5 s queue delay and a batch of 8 that never fills: the lone request waits in the queue.
    state.batchers = Batchers(BatchPolicy(max_batch=8, max_queue_delay_us=5_000_000), slots=1)
    key = new_tenant(client, "acme")
    upload(client, key, "relu", _relu_built())
    body = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]}
    headers = {**auth(key), "Graphgate-Timeout-Ms": "200"}
    answer = client.post("/v2/models/relu/infer", json=body, headers=headers)
    assert answer.status_code == 504, answer.text
    assert answer.json()["code"] == "DEADLINE_EXCEEDED"
    (batcher,) = state.batchers._batchers.values()
    state.batchers.close()  # drains the queue: the expired request is dropped, never run
    assert batcher.batches == 0


def test_by_default_a_lone_request_is_never_held() -> None:
    """p99 with batching no worse than without: by default no request waits for others
    (a queue delay of 0); batches form only from requests that queued while workers were busy."""
    assert BatchPolicy().max_queue_delay_us == 0
    assert Settings.model_fields["batch_max_queue_delay_us"].default == 0


def test_metrics_report_the_provider(client: TestClient) -> None:
    text = client.get("/metrics", headers=auth(ADMIN_TOKEN)).text
    lines = [line for line in text.splitlines() if line.startswith("graphgate_execution_provider{")]
    on_cuda = session_device(True).on_cuda
    expected = (
        'graphgate_execution_provider{device="cuda:0",provider="CUDAExecutionProvider"} 1.0'
        if on_cuda
        else 'graphgate_execution_provider{device="cpu",provider="CPUExecutionProvider"} 1.0'
    )
    assert lines == [expected]


def test_admin_sets_a_versions_batching(client: TestClient) -> None:
    state = client.app.state  # type: ignore[attr-defined]
    state.batchers.close()
    # TEST-ONLY OVERRIDE (module docstring).
    state.batchers = Batchers(BatchPolicy(), slots=1, batchable=assume_batchable)
    key = new_tenant(client, "acme")
    upload(client, key, "relu", _relu_built())
    upload(client, key, "relu", _relu_built())
    policy = {"max_batch_size": 16, "max_queue_delay_us": 500, "preferred_batch_sizes": [4, 8]}
    url = "/v1/admin/models/acme/relu/1/batching"
    # Tenants may not set it, even on their own models.
    assert client.put(url, json=policy, headers=auth(key)).status_code == 403
    answer = client.put(url, json=policy, headers=auth(ADMIN_TOKEN))
    assert answer.status_code == 200, answer.text
    # Visible in the model listing (per version) and in version 1's V2 metadata only.
    versions = client.get("/v1/models/relu", headers=auth(key)).json()["versions"]
    assert [v["batching"] for v in versions] == [policy, None]
    v1 = client.get("/v2/models/relu/versions/1", headers=auth(key)).json()
    v2 = client.get("/v2/models/relu/versions/2", headers=auth(key)).json()
    assert v1["parameters"]["dynamic_batching"] == policy
    settings = state.settings  # version 2 has no override: the server's defaults
    assert v2["parameters"]["dynamic_batching"] == {
        "max_batch_size": settings.batch_max_size,
        "max_queue_delay_us": settings.batch_max_queue_delay_us,
        "preferred_batch_sizes": list(settings.batch_preferred_sizes),
    }
    # Requests to version 1 run in a batcher with its own policy.
    row = [0.5] * 16
    body = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": row}]}
    ran = client.post("/v2/models/relu/versions/1/infer", json=body, headers=auth(key))
    assert ran.status_code == 200, ran.text
    assert [b.policy.max_batch for b in state.batchers._batchers.values()] == [16]
    # Back to the server's defaults.
    assert client.delete(url, headers=auth(ADMIN_TOKEN)).status_code == 200
    v1 = client.get("/v2/models/relu/versions/1", headers=auth(key)).json()
    assert v1["parameters"]["dynamic_batching"]["max_batch_size"] == 32


@pytest.mark.parametrize(
    ("policy", "complaint"),
    [
        ({"max_batch_size": 4, "max_queue_delay_us": 0, "preferred_batch_sizes": [8]}, "got [8]"),
        ({"max_batch_size": 8, "max_queue_delay_us": 0, "preferred_batch_sizes": [4, 2]}, "4, 2"),
        ({"max_batch_size": 5000, "max_queue_delay_us": 0}, "max_batch_size"),
        ({"max_batch_size": 8, "max_queue_delay_us": -1}, "max_queue_delay_us"),
        ({"max_batch_size": 8, "max_queue_delay_us": 0, "delay": 1}, "delay"),
    ],
)
def test_bad_batching_is_a_400(
    client: TestClient, policy: dict[str, object], complaint: str
) -> None:
    key = new_tenant(client, "acme")
    upload(client, key, "relu", _relu_built())
    answer = client.put(
        "/v1/admin/models/acme/relu/1/batching", json=policy, headers=auth(ADMIN_TOKEN)
    )
    assert answer.status_code == 400, answer.text
    assert complaint in answer.json()["error"]


@pytest.mark.parametrize("path", ["nobody/relu/1", "acme/other/1", "acme/relu/9"])
def test_batching_of_a_missing_version_is_a_404(client: TestClient, path: str) -> None:
    key = new_tenant(client, "acme")
    upload(client, key, "relu", _relu_built())
    policy = {"max_batch_size": 8, "max_queue_delay_us": 0}
    answer = client.put(f"/v1/admin/models/{path}/batching", json=policy, headers=auth(ADMIN_TOKEN))
    assert answer.status_code == 404, answer.text


# -- cost-aware batch sizes (module docstring of server/dispatch/batching.py, "Cost") --------

MS = 1e-3


def _cap(
    ready: int = 32,
    per_row: float = 0.1 * MS,
    budget: float = 10 * MS,
    slack: float | None = None,
    idle: int = 1,
    threads: int = 1,
) -> int:
    return batch_cap(
        ready_rows=ready,
        max_rows=32,
        seconds_per_row=per_row,
        max_run_s=budget,
        slack_s=slack,
        idle_threads=idle,
        threads=threads,
    )


def test_cheap_rows_batch_up_to_the_max() -> None:
    # 32 rows of 0.1 ms: 3.2 ms, within 10 ms; max_batch binds.
    assert _cap(per_row=0.1 * MS) == 32
    # Rows of unknown (no) cost: max_batch.
    assert _cap(per_row=0.0) == 32


def test_costly_rows_run_one_at_a_time() -> None:
    # A ResNet50 row, ~40 ms, is over the 10 ms budget alone: a request is still run, alone,
    # while the queue is short (4 rows keep the newest waiting 160 ms: a quarter, 40 ms).
    assert _cap(ready=4, per_row=40 * MS) == 1


def test_a_batch_takes_the_rows_its_budget_pays_for() -> None:
    # (A queue of 12 rows of 1 ms: its share, 3 ms, is under either budget.)
    assert _cap(ready=12, per_row=1 * MS, budget=10 * MS) == 10
    assert _cap(ready=12, per_row=1 * MS, budget=4.5 * MS) == 4


def test_the_most_pressed_deadline_halves_into_the_budget() -> None:
    # 8 ms left to the most pressed queued request: batches of at most 4 ms, 4 rows of 1 ms.
    assert _cap(per_row=1 * MS, slack=8 * MS) == 4
    # A far deadline changes nothing; one already passed still lets a request run.
    assert _cap(per_row=1 * MS, slack=60.0) == 10
    assert _cap(per_row=1 * MS, slack=-1.0) == 1


def test_costly_ready_rows_are_shared_among_idle_threads() -> None:
    # 12 rows of 1 ms (12 ms > 10 ms budget) and two idle threads: 6 each, not 10 and 2.
    assert _cap(ready=12, per_row=1 * MS, idle=2) == 6
    assert _cap(ready=13, per_row=1 * MS, idle=2) == 7  # ceil: no row is left over
    # Cheap rows are not split: one run of 32 costs less than two of 16.
    assert _cap(ready=32, per_row=0.1 * MS, idle=2) == 32


def test_row_cost_is_the_prior_until_a_run_is_measured() -> None:
    cost = RowCost(0.4)
    assert cost.seconds == 0.4
    cost.observe(1, 0.04)  # one row: its run's seconds
    assert cost.seconds == pytest.approx(0.04)
    cost.observe(1, 0.05)
    assert 0.04 < cost.seconds < 0.05  # runs of one size: their average seconds per row


def test_runs_of_one_row_count_no_more_than_the_prior() -> None:
    """A run of one row includes its fixed part (a session's first run: tens of ms): no
    more than the FLOPs' figure, so a cheap model still batches after a slow first run."""
    cost = RowCost(1e-6)
    cost.observe(1, 0.030)
    assert cost.seconds == pytest.approx(1e-6)


def test_row_cost_is_the_slope_of_the_runs_line() -> None:
    """What a further row adds, not seconds per row: a run's fixed part (2 ms here) is paid
    by a lone request too, so it is no reason to keep batches small."""
    cost = RowCost(1.0)
    for rows in [1, 16, 4, 9, 2, 12, 7] * 5:
        cost.observe(rows, 2 * MS + rows * 0.1 * MS)
    assert cost.seconds == pytest.approx(0.1 * MS, rel=1e-6)


def test_one_preempted_run_does_not_collapse_the_batches() -> None:
    cost = RowCost(1.0)
    for rows in [1, 16, 4, 9, 2, 12, 7] * 5:
        cost.observe(rows, 2 * MS + rows * 0.1 * MS)
    cost.observe(8, 1.0)  # another process had the CPU for a second
    assert _cap(per_row=cost.seconds) >= 16


# Runs of 1-3 rows as ResNet50's were at 32 clients on 2 CPUs (s = rows x 200 ms, plus 6 ms
# a further row beside a busy process; 3 ms + rows x 99 ms on the quiet machine).
_SIZES = [1, 3, 2, 3, 1, 3] * 5


def _loaded_run_s(rows: int) -> float:
    return rows * 0.200 + (rows - 1) * 0.006


def test_runs_that_share_no_fixed_part_are_found_and_checked_again_later() -> None:
    cost = RowCost(1.0)
    for rows in _SIZES:
        cost.observe(rows, _loaded_run_s(rows))
    assert cost.fixed == pytest.approx(-0.006, abs=1e-9)
    assert cost.shares_nothing
    for _ in range(2 * RECHECK_RUNS):  # runs of one row: no line to draw after a few
        cost.observe(1, _loaded_run_s(1))
    assert not cost.shares_nothing  # lapsed: batches are tried again


def _runs_until_lapsed(cost: RowCost, run_s: Callable[[int], float]) -> int:
    """Batches of _SIZES until the line is drawn again, then runs of one row (what requests
    run while `shares_nothing`) until the finding lapses: how many of those it held for."""
    for rows in _SIZES:
        cost.observe(rows, run_s(rows))
    held = 0
    while cost.shares_nothing:
        cost.observe(1, run_s(1))
        held += 1
    return held


def test_each_recheck_that_finds_no_fixed_part_again_waits_twice_as_long() -> None:
    cost = RowCost(1.0)
    held = [_runs_until_lapsed(cost, _loaded_run_s) for _ in range(7)]
    # Counted from the line's last draw, a run or two into the runs of one row.
    assert [round(h / RECHECK_RUNS) for h in held] == [1, 2, 4, 8, 16, 16, 16]
    # A small fixed part (3% of a row, as ResNet50's on the quiet machine) batches, but is not
    # clear enough to start the lapses over; a clear one (30%) is.
    for rows in _SIZES * 4:
        cost.observe(rows, 0.006 + rows * 0.200)
    assert cost.fixed is not None and 0 < cost.fixed < CLEAR_FIXED * cost.seconds
    assert not cost.shares_nothing and cost.recheck_runs == MAX_RECHECK_RUNS
    for rows in _SIZES * 4:
        cost.observe(rows, 0.060 + rows * 0.200)
    assert not cost.shares_nothing and cost.recheck_runs == RECHECK_RUNS
    for rows in _SIZES * 4:
        cost.observe(rows, _loaded_run_s(rows))
    assert cost.shares_nothing and cost.recheck_runs == RECHECK_RUNS


def test_runs_with_a_fixed_part_batch() -> None:
    cost = RowCost(1.0)
    for rows in _SIZES:
        cost.observe(rows, 0.003 + rows * 0.099)
    assert cost.fixed == pytest.approx(0.003, abs=1e-9)
    assert cost.seconds == pytest.approx(0.099, rel=1e-6)
    assert not cost.shares_nothing


def test_a_model_whose_runs_share_no_fixed_part_runs_unbatched_its_queue_first(
    pool: WorkerPool,
) -> None:
    """Its rows are cheap for the budget (10 s) but its runs share no fixed part: a request
    runs as an unbatched one, still measured, and a request already queued goes to the pool
    first, as an unbatched run too (not left to a batch thread)."""
    remote = _remote(pool, _relu().program_bytes(), None)
    batcher = Batcher(remote, LABEL, BatchPolicy(max_batch=32), 1, max_run_s=10.0)
    x = np.arange(-8, 8, dtype=np.float32).reshape(1, 16)
    try:
        for rows in _SIZES:
            batcher.cost.observe(rows, _loaded_run_s(rows))
        with batcher._cond:  # no batch thread takes it before the next request comes
            queued = batcher.submit({"x": x}, _same)
            ran = batcher.alone_is_better(1)
        assert ran is not None
        np.testing.assert_allclose(queued.result(60)["y"], np.maximum(x, 0))
        assert not batcher.recent  # no batch thread ran it
        assert batcher.batches == 1  # counted as a batch of one
        ran(_loaded_run_s(1))
        assert batcher.cost.measured == len(_SIZES) + 2  # the drained run's seconds and this
    finally:
        batcher.close()


@pytest.mark.parametrize(("urgent_s", "first_rows"), [(2.05, 10), (60.0, 21)])
def test_a_pressed_request_is_not_kept_behind_a_long_batch(
    pool: WorkerPool, urgent_s: float, first_rows: int
) -> None:
    """Rows cost 0.1 s each (the batcher's figure, set here); 20 queued requests have a
    minute, one from another source has `urgent_s`. With ~2 s left it goes out in a batch
    of at most 10 rows (1 s: half its time); with a minute, one batch takes all 21."""
    program = _relu().program_bytes()
    remote = _remote(pool, program, None)
    policy = BatchPolicy(max_batch=32, max_queue_delay_us=200_000)
    batcher = Batcher(remote, LABEL, policy, 1, max_run_s=10.0)
    batcher.cost = RowCost(0.1)  # what a row adds, as the batcher has it before any run
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((1, 16), dtype=np.float32)} for _ in range(21)]
    try:
        with batcher._cond:  # every request queued before a batch thread looks
            now = time.monotonic()
            futures = [
                batcher.submit(f, _same, source="bulk", deadline=now + 60) for f in feeds[:20]
            ]
            futures.append(
                batcher.submit(feeds[20], _same, source="urgent", deadline=now + urgent_s)
            )
        results = [f.result(60) for f in futures]
    finally:
        batcher.close()
    first = batcher.recent[0]
    assert "urgent" in first
    if first_rows < len(feeds):
        assert 2 <= len(first) <= first_rows
    else:
        assert len(first) == first_rows
    for f, result in zip(feeds, results, strict=True):
        np.testing.assert_allclose(result["y"], np.maximum(f["x"], 0), rtol=1e-6)


def test_a_model_whose_row_is_over_the_budget_runs_unbatched(pool: WorkerPool) -> None:
    """Its batch would be one row anyway: the request is not queued, its run is still
    measured and counted as a batch of one. Both the validator's figure and the measured
    runs must say so: runs of one row on a loaded machine alone do not."""
    remote = _remote(pool, _relu().program_bytes(), None)
    sizes = BatchSizes()
    batcher = Batcher(remote, LABEL, BatchPolicy(max_batch=32), 1, sizes, max_run_s=0.010)
    try:
        batcher.cost.observe(1, 0.001)  # a row measured at 1 ms: it queues and batches
        assert batcher.alone_is_better(1) is None
        batcher.cost = RowCost(batcher.cost.prior)  # relu's FLOPs: a row is cheap
        batcher.cost.observe(1, 0.200)  # yet a run of one row took 200 ms (a loaded machine)
        assert batcher.alone_is_better(1) is None
        batcher.cost = RowCost(0.040)  # FLOPs for 40 ms, over the 10 ms budget
        ran = batcher.alone_is_better(1)
        assert ran is not None
        ran(0.030)
        assert batcher.cost.seconds == pytest.approx(0.030)
        assert sizes.snapshot()[LABEL] == ([1] + [0] * len(BatchSizes.BOUNDS), 1)
    finally:
        batcher.close()


@pytest.mark.parametrize("max_run_ms", [1e-7, LOAD_PROOF_S * 1e3])
def test_many_clients_get_exact_answers_in_batches_their_budget_allows(
    make_settings: SettingsFactory, max_run_ms: float | None
) -> None:
    """16 clients at once against `graphgate`'s app (real workers), the batch queue held open
    200 ms so that they meet. With a 0.1 ns budget (GRAPHGATE_BATCH_MAX_RUN_MS) a row alone
    is over it (relu's 16 FLOPs a row alone take longer): every run is one row, as /metrics
    reports, and no request waits behind a batch; with a budget no run reaches (so that a
    loaded machine's slow runs cannot decide it) the same clients share runs."""
    settings = make_settings(batch_max_queue_delay_us=200_000, batch_max_run_ms=max_run_ms)
    clients, each = 16, 3
    rng = np.random.default_rng(11)
    warm = 5  # runs one by one first: the version's cost measured (a session's first is slow)
    rows = rng.standard_normal((warm + clients * each, 16)).astype(np.float32)
    with TestClient(create_app(settings)) as client:
        key = new_tenant(client, "acme")
        upload(client, key, "relu", _relu_built())

        def ask(i: int) -> list[float]:
            data = rows[i].tolist()
            body = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": data}]}
            response = client.post("/v2/models/relu/infer", json=body, headers=auth(key))
            assert response.status_code == 200, response.text
            answer: list[float] = response.json()["outputs"][0]["data"]
            return answer

        answers = {i: ask(i) for i in range(warm)}

        def one_client(c: int) -> None:
            for i in range(warm + c * each, warm + (c + 1) * each):
                answers[i] = ask(i)

        threads = [threading.Thread(target=one_client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        sizes = _batch_size_samples(client.get("/metrics", headers=auth(ADMIN_TOKEN)).text)
    assert sorted(answers) == list(range(len(rows)))
    labels = 'model="relu",tenant="acme",version="1"'
    row_seconds = sizes[f"graphgate_batch_row_seconds{{{labels}}}"]  # what a row adds, measured
    for i, row in enumerate(rows):
        np.testing.assert_allclose(answers[i], np.maximum(row, 0), rtol=1e-6)
    assert sizes[f"graphgate_batch_size_sum{{{labels}}}"] == len(rows)
    runs = sizes[f"graphgate_batch_size_count{{{labels}}}"]
    one_row_runs = sizes[f'graphgate_batch_size_bucket{{le="1",{labels}}}']
    if max_run_ms < 1:
        assert row_seconds > max_run_ms / 1e3  # a row alone is over the budget: one per run
        assert one_row_runs == runs == len(rows)
    else:
        assert one_row_runs < runs < len(rows)


def test_a_deep_queue_lets_costly_rows_batch_whatever_the_machines_speed() -> None:
    """28 ResNet50 rows queued for 2 batch threads: each waits ~14 rows' time anyway, so a
    batch may add a quarter of that (3 rows), at 120 ms a row or at 160 (where the 300 ms
    budget alone allows 2 rows or 1)."""
    for per_row in (120 * MS, 160 * MS):
        assert _cap(ready=28, per_row=per_row, budget=300 * MS, threads=2) == 3
    # A short queue: the budget alone, as before.
    assert _cap(ready=2, per_row=160 * MS, budget=300 * MS, threads=2) == 1
    # The most pressed deadline still binds: 640 ms left, batches of at most 320 ms.
    assert _cap(ready=28, per_row=160 * MS, budget=300 * MS, threads=2, slack=0.64) == 2


def test_the_queues_share_is_split_among_idle_threads() -> None:
    # 28 rows of 160 ms, both threads idle: the share allows 3 rows, and no thread takes more
    # than its half of the ready rows.
    assert _cap(ready=28, per_row=160 * MS, budget=300 * MS, threads=2, idle=2) == 3
    assert _cap(ready=4, per_row=160 * MS, budget=300 * MS, threads=2, idle=2) == 1
