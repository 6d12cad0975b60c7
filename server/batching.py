"""Dynamic batching per model version, only for programs the validator proves batchable.

Requests whose feeds agree on every non-batch dim and dtype are concatenated along the batch
axis, run as ONE worker run (server/workers: `RemoteModel.run`, the pool's public API), and
the outputs are split back by rows. Batching happens before dispatch, so a batch costs one
IPC round trip and one `session.run` instead of one per request.

Dispatch (as Triton's dynamic batcher): a batch is formed only while a worker slot is free
(at most `slots` batches in flight, one per worker). It closes when it holds `max_batch` rows
(or the largest preferred size), or when its oldest request has waited `max_queue_delay_us`.
While every slot is busy, requests accumulate, so batches grow with load by themselves.

Fairness: the queue is one FIFO per *source* (the caller's API key id; a shared model would
key by tenant), served round-robin: a batch takes the head of each source in turn, so one
client that floods the queue fills at most its share of every batch while others wait.
Models belong to one tenant today, so tenants never share a queue; keying by source keeps
the batcher ready for shared models (key by tenant there) without a change of design.

Failures: a deadline or a cancel is per request (a request leaves the queue at its own
deadline; a running batch is stopped only when every member went away). A worker crash fails
the whole batch alike. Any other error (a bad value in one request's feeds, a batch over the
request budget) reruns each member alone, so every request gets the answer it would get
unbatched.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import numpy as np

from executor.errors import DeadlineExceeded, RunCancelled
from server.workers import (
    Cancel,
    ModelQuarantined,
    RemoteModel,
    WorkerCrashed,
    WorkerOutOfMemory,
    WorkerUnavailable,
)
from validator import Report

T = TypeVar("T")
Feeds = Mapping[str, np.ndarray]
Outputs = dict[str, np.ndarray]
Label = tuple[str, str, int]
# Failures that are the batch's, not one member's: every member gets them as they are.
_SHARED_FAILURES: Final = (
    WorkerCrashed,
    WorkerOutOfMemory,
    ModelQuarantined,
    WorkerUnavailable,
    DeadlineExceeded,
    RunCancelled,
)


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """How one model version batches. `max_batch` counts rows (0: no batching)."""

    max_batch: int = 32
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "max_batch_size": self.max_batch,
            "max_queue_delay_us": self.max_queue_delay_us,
            "preferred_batch_sizes": list(self.preferred_batch_sizes),
        }

    @classmethod
    def from_json(cls, stored: Mapping[str, object]) -> BatchPolicy:
        """A policy as `to_json` writes it (an admin's stored override)."""
        sizes = stored.get("preferred_batch_sizes") or ()
        assert isinstance(sizes, list | tuple)
        return cls(
            int(str(stored["max_batch_size"])),
            int(str(stored["max_queue_delay_us"])),
            tuple(int(size) for size in sizes),
        )

    @property
    def target(self) -> int:
        """Rows at which a batch closes without waiting further."""
        return max(self.preferred_batch_sizes, default=self.max_batch) or self.max_batch


def proven_batchable(report: Report) -> bool:
    """The validator's batch-independence proof (validator/batch.py, `report.batchable`)."""
    return report.batchable


def batch_axis_everywhere(report: Report) -> bool:
    """Every input has a variable first dim: the axis requests are concatenated on."""
    return bool(report.inputs) and all(s.dims and s.dims[0] < 0 for s in report.inputs)


class _Item(Generic[T]):
    __slots__ = (
        "arrived",
        "cancel",
        "deadline",
        "feeds",
        "finish",
        "future",
        "key",
        "rows",
        "source",
    )

    def __init__(
        self,
        feeds: Feeds,
        finish: Callable[[Outputs], T],
        deadline: float | None,
        cancel: Cancel | None,
        source: str,
    ) -> None:
        self.source = source
        self.feeds = feeds
        self.finish = finish
        self.deadline = deadline
        self.cancel = cancel
        self.rows = int(next(iter(feeds.values())).shape[0])
        self.key = tuple((n, a.dtype.str, a.shape[1:]) for n, a in sorted(feeds.items()))
        self.arrived = time.monotonic()
        self.future: Future[T] = Future()

    @property
    def gone(self) -> bool:
        """The client left, or its waiter gave up (a cancelled future)."""
        return self.future.cancelled() or (self.cancel is not None and self.cancel.is_set())


class Batcher:
    """The queue and dispatcher of one model version (see the module docstring)."""

    def __init__(
        self, model: RemoteModel, label: Label | None, policy: BatchPolicy, slots: int
    ) -> None:
        self.model = model
        self.label = label
        self.policy = policy
        self._max_bytes = model.options.max_request_bytes
        self._queues: dict[str, deque[_Item[object]]] = {}  # insertion order: round-robin
        self._rows = 0
        self._cond = threading.Condition()
        self._slots = threading.Semaphore(slots)
        self._runner = ThreadPoolExecutor(slots, thread_name_prefix="graphgate-batch")
        self._closed = False
        self.batches = 0  # batches run, and the rows in them (metrics, benchmarks)
        self.batched_rows = 0
        self.recent: deque[tuple[str, ...]] = deque(maxlen=64)  # sources of recent batches
        self._thread = threading.Thread(target=self._loop, name="graphgate-batcher", daemon=True)
        self._thread.start()

    # -- callers ---------------------------------------------------------------------------

    def submit(
        self,
        feeds: Feeds,
        finish: Callable[[Outputs], T],
        *,
        source: str = "",
        deadline: float | None = None,
        cancel: Cancel | None = None,
    ) -> Future[T]:
        """Queues one request; its future holds `finish(outputs)`, computed on a batch thread
        (encoding the response there keeps it off the event loop)."""
        item: _Item[T] = _Item(feeds, finish, deadline, cancel, source)
        with self._cond:
            if self._closed:
                raise WorkerUnavailable("the server is shutting down")
            self._queues.setdefault(source, deque()).append(item)  # type: ignore[arg-type]
            self._rows += item.rows
            self._cond.notify()
        if cancel is not None:
            cancel.on_cancel(lambda: self._cancelled(item))  # type: ignore[arg-type]
        return item.future

    def run(
        self,
        feeds: Feeds,
        *,
        source: str = "",
        deadline: float | None = None,
        cancel: Cancel | None = None,
    ) -> Outputs:
        """`submit` and wait: the outputs of this request alone."""
        future = self.submit(feeds, _same, source=source, deadline=deadline, cancel=cancel)
        return wait(future, deadline)

    def close(self, wait: bool = True) -> None:
        """Takes no new requests; the queued ones still run (the thread drains, then ends)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if wait:
            self._thread.join(5.0)

    # -- the dispatcher thread -------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            self._slots.acquire()
            batch = self._next_batch()
            if batch is None:
                self._runner.shutdown(wait=False)  # running batches finish
                return
            if not batch:
                self._slots.release()
                continue
            self.recent.append(tuple(item.source for item in batch))
            self._runner.submit(self._run, batch)

    def _next_batch(self) -> list[_Item[object]] | None:
        """Waits for requests, then for the batch to fill or its oldest to wait long enough."""
        delay = self.policy.max_queue_delay_us / 1e6
        with self._cond:
            while not self._rows and not self._closed:
                self._cond.wait()
            if not self._rows:
                return None  # closed and drained
            close_at = min(q[0].arrived for q in self._queues.values() if q) + delay
            while self._rows < self.policy.target and not self._closed:
                left = close_at - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._take()

    def _take(self) -> list[_Item[object]]:
        """Round-robin over sources, heads only (each source stays FIFO), same dims as the
        first; drops members that left or expired. Called holding the lock."""
        now = time.monotonic()
        limit = self._limit()
        taken: list[_Item[object]] = []
        rows = nbytes = 0
        key: tuple[object, ...] | None = None
        progress = True
        while progress:
            progress = False
            for source in list(self._queues):
                queue = self._queues[source]
                item = self._pop_live(queue, now)
                if item is None:
                    del self._queues[source]
                    continue
                size = _nbytes(item.feeds)
                fits = rows + item.rows <= limit and nbytes + size <= self._max_bytes
                if taken and (item.key != key or not fits):
                    queue.appendleft(item)
                    continue
                queue_rows = item.rows
                taken.append(item)
                key, rows, nbytes = item.key, rows + queue_rows, nbytes + size
                self._rows -= queue_rows
                self._queues[source] = self._queues.pop(source)  # served: to the back
                progress = rows < limit
        return taken

    def _limit(self) -> int:
        """Rows of the batch about to close: the largest preferred size that is ready, else
        everything ready up to max_batch."""
        ready = min(self._rows, self.policy.max_batch)
        fitting = [size for size in self.policy.preferred_batch_sizes if size <= ready]
        return max(fitting, default=ready)

    def _pop_live(self, queue: deque[_Item[object]], now: float) -> _Item[object] | None:
        while queue:
            item = queue.popleft()
            if item.gone:
                self._rows -= item.rows
                _fail(item, RunCancelled("the client went away while the request was queued"))
            elif item.deadline is not None and now >= item.deadline:
                self._rows -= item.rows
                _fail(item, DeadlineExceeded("the request waited for a batch past its deadline"))
            else:
                return item
        return None

    def _cancelled(self, item: _Item[object]) -> None:
        """A queued request whose client left fails now, not when a worker frees up."""
        with self._cond:
            for queue in self._queues.values():
                if item in queue:
                    queue.remove(item)
                    self._rows -= item.rows
                    break
            else:
                return  # running, or done
        _fail(item, RunCancelled("the client went away while the request was queued"))

    # -- a batch thread --------------------------------------------------------------------

    def _run(self, batch: list[_Item[object]]) -> None:
        try:
            if len(batch) == 1:
                self._run_alone(batch[0])
            else:
                self._run_together(batch)
        finally:
            self._slots.release()

    def _run_alone(self, item: _Item[object]) -> None:
        try:
            outputs = self.model.run(
                item.feeds, deadline=item.deadline, cancelled=item.cancel, label=self.label
            )
        except BaseException as error:
            _fail(item, error)
            return
        self._count(item.rows)
        _finish(item, outputs)

    def _run_together(self, batch: list[_Item[object]]) -> None:
        names = list(batch[0].feeds)
        feeds = {n: np.concatenate([item.feeds[n] for item in batch]) for n in names}
        together = Cancel()
        for item in batch:
            if item.cancel is not None:
                item.cancel.on_cancel(lambda: _all_gone(batch, together))
        deadlines = [item.deadline for item in batch]
        deadline = None if None in deadlines else max(d for d in deadlines if d is not None)
        try:
            outputs = self.model.run(feeds, deadline=deadline, cancelled=together, label=self.label)
            parts = _split(outputs, [item.rows for item in batch])
        except _SHARED_FAILURES as error:
            for item in batch:
                _fail(item, error)
            return
        except Exception:  # one member's fault, or a batch over a budget: each on its own
            parts = None
        if parts is None:
            for item in batch:
                self._run_alone(item)
            return
        self._count(sum(item.rows for item in batch))
        for item, part in zip(batch, parts, strict=True):
            _finish(item, part)

    def _count(self, rows: int) -> None:
        with self._cond:
            self.batches += 1
            self.batched_rows += rows


class Batchers:
    """The batcher of every model version that batches, made on first use.

    `batchable(report)` decides which programs may batch: the validator's proof by default.
    Tests that need a program the proof refuses pass their own predicate (marked as a
    test-only override there). A model version's own policy (the admin's override, stored
    with the version: `LoadedModel.batching`) replaces the server's `policy`."""

    def __init__(
        self,
        policy: BatchPolicy,
        slots: int,
        batchable: Callable[[Report], bool] = proven_batchable,
    ) -> None:
        self.policy = policy
        self._slots = slots
        self._batchable = batchable
        self._batchers: dict[tuple[object, ...], Batcher] = {}
        self._lock = threading.Lock()

    def policy_for(
        self, report: Report, override: Mapping[str, object] | None = None
    ) -> BatchPolicy | None:
        """The policy this model batches with, or None when it does not batch."""
        if not (self._batchable(report) and batch_axis_everywhere(report)):
            return None
        policy = self.policy if override is None else BatchPolicy.from_json(override)
        return policy if policy.max_batch > 1 else None

    def for_model(
        self, model: RemoteModel, label: Label, override: Mapping[str, object] | None = None
    ) -> Batcher | None:
        policy = self.policy_for(model.program.report, override)
        if policy is None:
            return None
        key = (*label, model.key, policy)
        with self._lock:
            batcher = self._batchers.get(key)
            if batcher is not None:
                return batcher
            # A changed policy: the version's old batcher drains and ends on its own.
            stale = [k for k in self._batchers if k[:3] == label and k != key]
            for old in stale:
                self._batchers.pop(old).close(wait=False)
            batcher = self._batchers[key] = Batcher(model, label, policy, self._slots)
            return batcher

    def close(self) -> None:
        with self._lock:
            batchers, self._batchers = list(self._batchers.values()), {}
        for batcher in batchers:
            batcher.close()


async def wait_async(future: Future[T], deadline: float | None) -> T:
    """`wait` for the event loop: no thread waits, the batch thread wakes the loop."""
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
    except TimeoutError:
        raise DeadlineExceeded("the request ran past its deadline and was stopped") from None


def wait(future: Future[T], deadline: float | None) -> T:
    """The future's result, or DeadlineExceeded at `deadline` (the batch may run on)."""
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        return future.result(timeout)
    except TimeoutError:
        raise DeadlineExceeded("the request ran past its deadline and was stopped") from None


def _split(outputs: Outputs, rows: list[int]) -> list[Outputs] | None:
    """Each member's rows of every output; None when an output is not batch-major."""
    total = sum(rows)
    if any(v.ndim == 0 or v.shape[0] != total for v in outputs.values()):
        return None
    cuts = list(itertools.accumulate(rows))[:-1]
    per_output = {name: np.split(value, cuts) for name, value in outputs.items()}
    return [{name: parts[i] for name, parts in per_output.items()} for i in range(len(rows))]


def _all_gone(batch: list[_Item[object]], together: Cancel) -> None:
    if all(item.gone for item in batch):
        together.set()


def _nbytes(feeds: Feeds) -> int:
    return sum(int(a.nbytes) for a in feeds.values())


def _same(outputs: Outputs) -> Outputs:
    return outputs


def _finish(item: _Item[object], outputs: Outputs) -> None:
    try:
        result = item.finish(outputs)
    except BaseException as error:
        _fail(item, error)
        return
    with contextlib.suppress(InvalidStateError):  # its waiter gave up meanwhile
        item.future.set_result(result)


def _fail(item: _Item[object], error: BaseException) -> None:
    with contextlib.suppress(InvalidStateError):
        item.future.set_exception(error)
