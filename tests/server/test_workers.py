"""Crash-isolated workers through the real app: real worker processes, killed for real."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import Pipe
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from fastapi.testclient import TestClient

from executor import CompiledModel, SessionOptions
from executor.errors import DeadlineExceeded, RunCancelled
from server.dispatch import PoolSettings, RemoteModel, WorkerPool
from server.dispatch.pool import _POLL_S, _Handoff, without_frames
from server.dispatch.worker import SessionCache, _Cancels, at_lower_priority
from server.errors import WorkerOutOfMemory
from server.main import create_app
from server.services.limits import CompileQueue, TooManyCompiles
from server.storage import open_artifacts
from tests.support.api import ADMIN_TOKEN, auth, new_tenant
from tests.support.backends import SettingsFactory
from tests.support.builders import Built, affine, large_program, matmul_chain, mlp
from tests.support.uploads import post_upload, upload
from validator import Policy

SLOW = matmul_chain(200).built()  # n=1024: seconds of matmuls; n=4: microseconds
AFFINE = affine().built()


@pytest.fixture
def client(make_settings: SettingsFactory) -> Iterator[TestClient]:
    settings = make_settings(workers=2, use_cuda=False, worker_memory_mb=3072)
    with TestClient(create_app(settings)) as c:
        yield c


def _pool(client: TestClient) -> WorkerPool:
    pool: WorkerPool = client.app.state.workers  # type: ignore[attr-defined]
    return pool


def _infer(
    client: TestClient, key: str, name: str, x: np.ndarray, headers: dict[str, str] | None = None
) -> Any:
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.reshape(-1).tolist()}]}  # fmt: skip
    return client.post(f"/v2/models/{name}/infer", json=body, headers=auth(key) | (headers or {}))


def _binary_infer(
    client: TestClient, key: str, name: str, x: np.ndarray, headers: dict[str, str]
) -> Any:
    """As _infer, with x as binary data: no million-number JSON to encode and decode."""
    tensor = {"name": "x", "shape": list(x.shape), "datatype": "FP32",
              "parameters": {"binary_data_size": x.nbytes}}  # fmt: skip
    header = json.dumps({"inputs": [tensor]}).encode()
    headers = {**auth(key), "Inference-Header-Content-Length": str(len(header)), **headers}
    return client.post(f"/v2/models/{name}/infer", content=header + x.tobytes(), headers=headers)


def _in_flight(
    client: TestClient, key: str, name: str, n: int
) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    x = np.eye(n, dtype=np.float32)
    thread = threading.Thread(target=lambda: answers.append(_infer(client, key, name, x)))
    thread.start()
    return thread, answers


def _busy_worker(pool: WorkerPool, timeout_s: float = 30.0) -> int:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if busy := pool.busy_pids():
            return busy[0]
        time.sleep(0.01)
    raise AssertionError("no worker took the request")


def _crash_one(client: TestClient, key: str, sig: signal.Signals) -> Any:
    pool = _pool(client)
    thread, answers = _in_flight(client, key, "slow", 1024)
    os.kill(_busy_worker(pool), sig)
    thread.join(60)
    (answer,) = answers
    return answer


def test_killed_workers_fail_their_request_alone_and_three_crashes_quarantine(
    client: TestClient,
) -> None:
    key_a, key_b = new_tenant(client, "tenant-a"), new_tenant(client, "tenant-b")
    upload(client, key_a, "slow", SLOW)
    upload(client, key_b, "m", AFFINE)
    x4 = np.eye(4, dtype=np.float32)
    for sig in (signal.SIGKILL, signal.SIGSEGV):
        crashed = _crash_one(client, key_a, sig)
        assert crashed.status_code == 503, crashed.text
        assert crashed.json()["code"] == "WORKER_CRASHED"
        again = _infer(client, key_a, "slow", x4)  # a fresh worker loads the model lazily
        assert again.status_code == 200, again.text
        np.testing.assert_allclose(again.json()["outputs"][0]["data"], x4.reshape(-1))
        other = _infer(client, key_b, "m", np.ones((1, 4), np.float32))
        assert other.status_code == 200, other.text
    assert len(_pool(client).pids()) == 2
    third = _crash_one(client, key_a, signal.SIGABRT)
    assert third.json()["code"] == "WORKER_CRASHED"
    held = _infer(client, key_a, "slow", x4)
    assert held.status_code == 503 and held.json()["code"] == "MODEL_QUARANTINED"
    got = client.get("/v1/models/slow", headers=auth(key_a)).json()
    assert got["versions"][0]["status"] == "quarantined"
    assert _infer(client, key_b, "m", np.ones((1, 4), np.float32)).status_code == 200
    released = client.post(
        "/v1/admin/quarantine/tenant-a/slow/1/release", headers=auth(ADMIN_TOKEN)
    )
    assert released.status_code == 200, released.text
    assert _infer(client, key_a, "slow", x4).status_code == 200


def test_a_compile_worker_killed_mid_upload_fails_that_upload_alone(client: TestClient) -> None:
    key = new_tenant(client, "tenant-a")
    pool = _pool(client)
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(post_upload(client, key, "m", SLOW)))
    thread.start()
    os.kill(_busy_worker(pool), signal.SIGKILL)
    thread.join(60)
    (answer,) = answers
    assert answer.status_code == 503 and answer.json()["code"] == "WORKER_CRASHED"
    assert client.get("/v1/models/m", headers=auth(key)).status_code == 404
    settings = client.app.state.settings  # type: ignore[attr-defined]
    if settings.artifacts_url is None:  # the folder: a temp file left behind counts too
        assert not [p for p in (settings.data_dir / "artifacts").rglob("*") if p.is_file()]
    assert list(open_artifacts(settings.artifacts_url, settings.data_dir).list()) == []
    upload(client, key, "m", AFFINE)  # the next upload is served


def test_a_long_run_answers_504_at_its_deadline_and_the_worker_serves_the_next(
    client: TestClient,
) -> None:
    key = new_tenant(client, "tenant-a")
    upload(client, key, "slow", SLOW)
    start = time.monotonic()
    late = _binary_infer(
        client, key, "slow", np.eye(1024, dtype=np.float32), {"Graphgate-Timeout-Ms": "300"}
    )
    assert late.status_code == 504 and late.json()["code"] == "DEADLINE_EXCEEDED"
    # At its deadline: 0.34-0.45 s measured at a load average of 7-9 (the input in binary: as
    # JSON, a million numbers took 1-2.4 s to send and decode). 5 s is over ten times that.
    assert time.monotonic() - start < 5
    pids = _pool(client).pids()
    assert _infer(client, key, "slow", np.eye(4, dtype=np.float32)).status_code == 200
    assert _pool(client).pids() == pids  # no worker was replaced


def test_a_request_over_the_run_time_budget_is_413_before_it_runs(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(
        workers=1,
        use_cuda=False,
        max_flops_per_sample=10**6,
        max_dynamic_dim=64,
    )
    with TestClient(create_app(settings)) as client:
        key = new_tenant(client, "tenant-a")
        upload(client, key, "chain", matmul_chain(3).built())
        assert _infer(client, key, "chain", np.eye(8, dtype=np.float32)).status_code == 200
        over = _infer(client, key, "chain", np.eye(1000, dtype=np.float32))
        assert over.status_code == 413, over.text
        assert over.json()["code"] == "REQUEST_OVER_BUDGET"
        assert "expected at most 1.0e+09 FLOPs, got 6.0e+09" in over.json()["error"]


# -- the pool itself: real workers, memory cap and session cache -----------------------------


def _model(pool: WorkerPool, built: Built, options: SessionOptions) -> RemoteModel:
    def source() -> tuple[bytes, bytes | None]:
        return built.program, built.params

    return pool.compile(built.program, built.params, Policy(), options, source)


def test_a_request_over_the_memory_cap_fails_alone_and_its_worker_is_replaced() -> None:
    pool = WorkerPool(PoolSettings(workers=1, memory_cap_bytes=1500 * 2**20))
    try:
        model = _model(
            pool, matmul_chain(2).built(), SessionOptions(use_cuda=False, max_request_bytes=2**31)
        )
        small = np.eye(64, dtype=np.float32)
        assert np.allclose(next(iter(model.run({"x": small}).values())), small)
        (before,) = pool.pids()
        with pytest.raises(WorkerOutOfMemory):  # 576 MB in, as much per product: over 1.5 GB
            model.run({"x": np.eye(12000, dtype=np.float32)})
        assert pool.pids() != [before]
        assert np.allclose(next(iter(model.run({"x": small}).values())), small)
    finally:
        pool.stop()


@contextlib.contextmanager
def _loads_through_a_queue(
    workers: int, per_tenant: int, total: int
) -> Iterator[tuple[WorkerPool, CompileQueue, RemoteModel]]:
    """A pool whose loads go through a real compile queue, and a model a worker lacks: each
    model holds 8.4 MiB of weights, the session cache takes 16 MiB."""
    pool = WorkerPool(PoolSettings(workers=workers, session_cache_bytes=16 * 2**20))
    queue = CompileQueue(threads=1, per_tenant=per_tenant, total=total)
    pool.queue_loads(queue.run_blocking)
    options = SessionOptions(use_cuda=False)
    try:
        first = _model(pool, mlp((8, 1024, 2048)).built(), options)
        _model(pool, mlp((8, 2048, 1024)).built(), options)  # a worker now lacks `first`
        yield pool, queue, first
    finally:
        pool.stop()
        queue.shutdown()


def test_requests_finding_a_model_missing_together_wait_for_one_load() -> None:
    """Many requests to a model a worker lacks take one compile place between them, not one
    each: with a cap of 1 per tenant, 8 at once all get their answers."""
    x = np.ones((2, 8), np.float32)
    with _loads_through_a_queue(workers=2, per_tenant=1, total=1) as (_pool, _queue, first):
        answers: list[Any] = [None] * 8

        def ask(index: int) -> None:
            try:
                answers[index] = first.run({"x": x}, label=("busy", "first", 1))
            except Exception as e:  # kept: the assertion below names it
                answers[index] = e

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [type(a).__name__ for a in answers] == ["dict"] * 8
    assert all(next(iter(a.values())).shape == (2, 2048) for a in answers)


def test_workers_map_big_blocks_with_huge_pages_and_the_server_keeps_its_malloc() -> None:
    before = os.environ.get("GLIBC_TUNABLES")
    pool = WorkerPool(PoolSettings(workers=1))
    try:
        pool.start()
        (pid,) = pool.pids()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        (tunables,) = [e for e in environ if e.startswith(b"GLIBC_TUNABLES=")]
        assert b"glibc.malloc.hugetlb=1" in tunables.split(b"=", 1)[1].split(b":")
        assert os.environ.get("GLIBC_TUNABLES") == before
    finally:
        pool.stop()


def test_the_session_cache_evicts_by_bytes_least_recently_used_first() -> None:
    # Each model holds 8.4 MiB of weights; the cache takes 16 MiB: one of them at a time, with
    # room left for the allocator's noise in the measured growth (a few MiB) and a tiny model.
    pool = WorkerPool(PoolSettings(workers=1, session_cache_bytes=16 * 2**20))
    options = SessionOptions(use_cuda=False)
    try:
        first = _model(pool, mlp((8, 1024, 2048)).built(), options)
        second = _model(pool, mlp((8, 2048, 1024)).built(), options)
        assert pool.cached_keys() == [second.key]
        x = np.ones((2, 8), np.float32)
        assert next(iter(first.run({"x": x}).values())).shape == (2, 2048)  # loaded again
        assert pool.cached_keys() == [first.key]
        tiny = _model(pool, affine().built(), options)  # a few bytes: fits beside the other
        assert pool.cached_keys() == [first.key, tiny.key]
    finally:
        pool.stop()


def test_a_model_a_worker_lacks_is_compiled_into_it_in_the_tenants_compile_turn() -> None:
    """A worker-level cache miss is a compile like any other: it takes a place in the compile
    queue under the tenant's cap (one tenant cycling models more than the workers hold waits
    for its own compiles), and its worker is not held while it waits."""
    x = np.ones((2, 8), np.float32)
    with _loads_through_a_queue(workers=1, per_tenant=1, total=4) as (pool, queue, first):
        with queue.slots.slot("greedy"):  # the tenant's one compile place is taken
            with pytest.raises(TooManyCompiles):
                first.run({"x": x}, label=("greedy", "first", 1))
            # Another tenant's load of the same model takes its own place, and the worker
            # the refused request held a moment ago is free for it.
            out = first.run({"x": x}, label=("patient", "first", 1))
        assert next(iter(out.values())).shape == (2, 2048)
        assert pool.cached_keys() == [first.key]
        assert queue.slots.in_flight_total() == 0


def _nice(pid: int, tid: int) -> int:
    """A thread's nice value, from /proc (field 19 of its stat; the name may hold spaces)."""
    stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread nice is Linux's")
def test_compile_work_runs_at_a_lower_priority_in_a_thread_of_its_own() -> None:
    caller = threading.get_native_id()
    before = _nice(os.getpid(), caller)
    seen: list[tuple[int, int]] = []

    def work() -> str:
        tid = threading.get_native_id()
        seen.append((tid, _nice(os.getpid(), tid)))
        return "compiled"

    assert at_lower_priority(work, 5) == "compiled"
    ((tid, nice),) = seen
    assert tid != caller and nice == min(19, before + 5)
    assert _nice(os.getpid(), caller) == before  # the caller's own priority is untouched

    def refused() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):  # errors reach the caller as they are
        at_lower_priority(refused, 5)
    seen.clear()
    at_lower_priority(work, 0)  # 0: inline, at the caller's priority
    assert seen == [(caller, before)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread nice is Linux's")
def test_a_worker_validates_an_upload_at_a_lower_priority_and_runs_at_normal() -> None:
    pool = WorkerPool(PoolSettings(workers=1, compile_nice=7))
    normal = _nice(os.getpid(), os.getpid())  # what the worker inherits
    try:
        pool.start()
        (pid,) = pool.pids()
        seen: set[int] = set()
        compiling = threading.Thread(
            target=_model, args=(pool, large_program(3000), SessionOptions(use_cuda=False))
        )
        compiling.start()
        while compiling.is_alive():  # validating 3,000 ops takes ~0.5 s: sampled meanwhile
            seen |= _nices(pid)
            time.sleep(0.002)
        compiling.join()
        assert min(19, normal + 7) in seen
        # onnxruntime's pool threads take the priority of the thread that builds the session:
        # it is built back at normal priority, so no run is slowed by the compile's nice value.
        model = _model(pool, mlp((16, 64, 8)).built(), SessionOptions(use_cuda=False))
        assert next(iter(model.run({"x": np.ones((2, 16), np.float32)}).values())).shape == (2, 8)
        threads = os.listdir(f"/proc/{pid}/task")
        assert len(threads) > 1  # onnxruntime's intra-op pool is there
        # The lowered thread is joined before the compile answers, but the kernel may list it
        # a moment longer while it exits (seen on a loaded machine): given a second to go.
        deadline = time.monotonic() + 1
        while (nices := _nices(pid)) != {normal} and time.monotonic() < deadline:
            time.sleep(0.01)
        assert nices == {normal}
    finally:
        pool.stop()


def _nices(pid: int) -> set[int]:
    nices = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # exited meanwhile
            nices.add(_nice(pid, int(tid)))
    return nices


def _affinities(pid: int) -> dict[int, set[int]]:
    """Each thread's CPUs, by thread id (the main thread's id is the process's)."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # exited meanwhile
            found[int(tid)] = os.sched_getaffinity(int(tid))
    return found


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning needs 2 CPUs and Linux's affinity calls",
)
@pytest.mark.parametrize("threads", [0, 2])
def test_a_workers_main_thread_runs_on_the_cpus_onnxruntime_left_it(threads: int) -> None:
    """onnxruntime's default thread count pins one thread per core and leaves the first core to
    the thread that calls its runs: the worker's main thread is pinned there. With a thread
    count given, onnxruntime pins nothing, and neither does the worker."""
    pool = WorkerPool(PoolSettings(workers=1))
    try:
        options = SessionOptions(use_cuda=False, intra_op_threads=threads)
        _model(pool, mlp((16, 64, 8)).built(), options)
        (pid,) = pool.pids()
        everything = os.sched_getaffinity(0)
        affinities = _affinities(pid)
        main = affinities.pop(pid)
        onnxruntime = set().union(*(c for c in affinities.values() if c < everything))
        if threads:
            assert (main, onnxruntime) == (everything, set())
        else:
            assert onnxruntime and main == everything - onnxruntime
    finally:
        pool.stop()


WORKERS: list[Any] = ["w1", "w2", "w3", "w4"]  # stand-ins: the handoff never looks inside


def _waiting(handoff: Any, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(handoff._waiters) < count:
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.001)


def test_a_freed_worker_goes_to_the_request_that_waited_longest() -> None:
    """Requests waiting for a worker get one in arrival order, however many times they
    re-polled for a cancel meanwhile, and a newcomer waits behind them (a queue.Queue let
    re-pollers lose their place and newcomers take workers first: p99 ~10x p50 at 32 callers)."""
    handoff = _Handoff()
    w1, w2, w3, w4 = WORKERS
    got: list[tuple[int, Any]] = []

    def request(i: int) -> None:
        got.append((i, handoff.get(lambda: None)))

    threads = []
    for i in range(3):
        threads.append(threading.Thread(target=request, args=(i,)))
        threads[-1].start()
        _waiting(handoff, i + 1)
    time.sleep(3 * _POLL_S)  # every waiter re-polls at least twice
    handoff.put(w1)
    threads.append(threading.Thread(target=request, args=(3,)))  # a newcomer, as w1 frees
    threads[-1].start()
    _waiting(handoff, 3)  # two old waiters left, then the newcomer
    for worker in (w2, w3, w4):
        handoff.put(worker)
    for thread in threads:
        thread.join(5)
    assert dict(got) == {0: w1, 1: w2, 2: w3, 3: w4}  # appended in any order


def test_an_idle_worker_is_taken_most_recently_freed_first() -> None:
    """Its caches and onnxruntime's threads are warm; in turn, each request got the coldest."""
    handoff = _Handoff()
    w1, w2, w3, _ = WORKERS
    for worker in (w1, w2, w3):
        handoff.put(worker)
    assert handoff.get(lambda: None) is w3
    handoff.put(w3)
    assert handoff.get(lambda: None) is w3
    assert handoff.get(lambda: None) is w2


class _Holding:
    """A stand-in worker for the handoff: the content keys it holds, as _Worker.holds."""

    def __init__(self, *keys: str) -> None:
        self.holds = set(keys)


def test_an_idle_worker_holding_the_model_is_taken_before_a_more_recently_freed_one() -> None:
    """Taking the most recently freed worker loaded a tenant's model into it (a compile)
    while the worker holding the model sat idle; a worker that holds it is taken first, the
    most recently freed of those, and without one the most recently freed of all."""
    handoff = _Handoff()
    holds_a, holds_b, holds_a_too, holds_none = (
        _Holding("a"), _Holding("b"), _Holding("a", "b"), _Holding()
    )  # fmt: skip
    for worker in (holds_a, holds_a_too, holds_b, holds_none):
        handoff.put(worker)  # type: ignore[arg-type]
    assert handoff.get(lambda: None, "a") is holds_a_too
    assert handoff.get(lambda: None, "a") is holds_a
    assert handoff.get(lambda: None, "c") is holds_none
    assert handoff.get(lambda: None, "a") is holds_b  # the only one left


def test_the_pool_runs_a_model_on_the_idle_worker_that_compiled_it() -> None:
    """Two idle workers, the one freed last lacking the model: the run goes to the one that
    compiled it, and no worker loads it a second time."""
    built = mlp((8, 8)).built()
    other = mlp((8, 4)).built()
    pool = WorkerPool(PoolSettings(workers=2))
    pool.start()
    try:
        options = SessionOptions(use_cuda=False)
        first = pool.compile(
            built.program, built.params, Policy(), options,
            lambda: (built.program, built.params),
        )  # fmt: skip
        holder = next(w for w in pool._workers if first.key in w.holds)
        # The other worker is freed last: it compiles a second model while the first is held.
        taken = pool._idle.get(lambda: None, first.key)
        assert taken is holder
        second = pool.compile(
            other.program, other.params, Policy(), options,
            lambda: (other.program, other.params),
        )  # fmt: skip
        pool._idle.put(taken)
        pool._idle.put(next(w for w in pool._workers if w is not holder))  # freed last
        for _ in range(3):
            first.run({"x": np.ones((1, 8), np.float32)})
        holding = [w for w in pool.session_stats() if first.key in w.sessions]
        assert len(holding) == 1
        assert second.key not in holder.holds
    finally:
        pool.stop()


def test_a_worker_hears_a_cancel_at_once_and_keeps_one_that_came_before_its_run() -> None:
    reader, writer = Pipe(duplex=False)
    cancels = _Cancels(reader)
    cancels.listen()
    running = cancels.start(7)
    writer.send(6)  # an earlier request's, late: not this run's
    writer.send(7)
    deadline = time.monotonic() + 5
    while not running.is_set():
        assert time.monotonic() < deadline, "the running request was never cancelled"
        time.sleep(0.001)
    cancels.finish()
    writer.send(8)  # the pool cancels request 8 before the worker has started it
    while cancels._last != 8:
        assert time.monotonic() < deadline, "the cancel never arrived"
        time.sleep(0.001)
    assert cancels.start(8).is_set()
    cancels.finish()
    assert not cancels.start(9).is_set()
    writer.close()


def test_a_request_that_gives_up_leaves_the_line() -> None:
    handoff = _Handoff()

    def cancelled() -> None:
        raise RunCancelled("gone")

    with pytest.raises(RunCancelled):
        handoff.get(cancelled)
    handoff.put(WORKERS[0])  # nobody waits: it is idle
    assert handoff.take_idle() == [WORKERS[0]]


def test_a_quarantine_is_kept_in_the_database_across_a_restart_until_released(
    make_settings: SettingsFactory,
) -> None:
    """Crashes are counted in the database: a restarted server (or any replica on the same
    database) still refuses the version until an operator releases it."""
    settings = make_settings(workers=2, quarantine_crashes=2)
    x4 = np.eye(4, dtype=np.float32)
    with TestClient(create_app(settings)) as first:
        key = new_tenant(first, "tenant-a")
        upload(first, key, "slow", SLOW)
        for sig in (signal.SIGKILL, signal.SIGKILL):
            assert _crash_one(first, key, sig).json()["code"] == "WORKER_CRASHED"
        assert _infer(first, key, "slow", x4).json()["code"] == "MODEL_QUARANTINED"
    with TestClient(create_app(settings)) as second:
        held = _infer(second, key, "slow", x4)
        assert held.status_code == 503 and held.json()["code"] == "MODEL_QUARANTINED"
        got = second.get("/v1/models/slow", headers=auth(key)).json()
        assert got["versions"][0]["status"] == "quarantined"
        viewer = second.post(
            "/v1/admin/admins", json={"name": "vera", "role": "viewer"}, headers=auth(ADMIN_TOKEN)
        ).json()["key"]
        path = "/v1/admin/quarantine/tenant-a/slow/1/release"
        assert second.post(path, headers=auth(viewer)).status_code == 403
        assert second.post(path, headers=auth(ADMIN_TOKEN)).status_code == 200
        assert _infer(second, key, "slow", x4).status_code == 200
        rows = second.get(
            "/v1/admin/audit", params={"action": "model.release"}, headers=auth(ADMIN_TOKEN)
        ).json()["entries"]
        assert [(r["actor"], r["outcome"]) for r in rows] == [
            ("admin:root", "ok"),
            ("admin:vera", "denied"),
        ]


def _raised_by_a_frame_holding(feeds: np.ndarray) -> DeadlineExceeded:
    """A worker's error as the pool raises it: from a frame that holds the request's feeds
    and the reply the error came in (pool._check)."""
    reply = ("err", DeadlineExceeded("the request ran past its deadline and was stopped"))
    try:
        raise reply[1]
    except DeadlineExceeded as error:
        return error


def test_an_error_handed_on_without_its_frames_frees_the_request_at_once() -> None:
    """The cancelled conv's memory finding (tests/server/test_hostile_answers.py): what the
    frames of a handed-on error held is freed by reference counting, not left to the cyclic
    garbage collector (disabled here)."""
    kept, freed = np.ones(1024, np.float32), np.ones(1024, np.float32)
    kept_alive, freed_alive = weakref.ref(kept), weakref.ref(freed)
    gc.disable()
    try:
        with_frames = _raised_by_a_frame_holding(kept)
        handed = without_frames(_raised_by_a_frame_holding(freed))
        del kept, freed, with_frames
        assert kept_alive() is not None  # the cycle: error -> traceback -> frame -> error
        assert freed_alive() is None
        assert str(handed) == "the request ran past its deadline and was stopped"
        assert handed.__traceback__ is None
    finally:
        gc.enable()
        gc.collect()


@dataclass(frozen=True)
class _Sized:
    """What a worker's session cache reads of a compiled model: its ONNX bytes (its cost)."""

    onnx_bytes: bytes
    provider: str = "CPUExecutionProvider"


def _session(size: int) -> CompiledModel:
    return cast(CompiledModel, _Sized(bytes(size)))


def test_a_tenant_cycling_sessions_in_a_worker_evicts_its_own_not_another_tenants() -> None:
    cache = SessionCache(cap_bytes=1000)  # two tenants: a share of 500 bytes each
    cache.put("other-a", _session(200), "other")
    cache.put("other-b", _session(200), "other")
    for i in range(10):
        cache.put(f"cycler-{i}", _session(200), "cycler")
    assert cache.keys() == ["other-a", "other-b", "cycler-7", "cycler-8", "cycler-9"]
    assert cache.total == 1000


def test_a_tenant_under_its_share_takes_bytes_from_the_one_holding_the_most() -> None:
    cache = SessionCache(cap_bytes=1000)
    for i in range(5):
        cache.put(f"cycler-{i}", _session(200), "cycler")  # the whole cache, alone
    cache.put("other-a", _session(200), "other")
    assert cache.keys() == ["cycler-1", "cycler-2", "cycler-3", "cycler-4", "other-a"]
    # A session another tenant runs is counted in that tenant's share from then on.
    assert cache.get("cycler-1", "other") is not None
    cache.put("cycler-5", _session(200), "cycler")
    assert cache.keys() == ["cycler-3", "cycler-4", "other-a", "cycler-1", "cycler-5"]
    assert cache.owners()["cycler-1"] == "other"
