"""Dynamic batching per model version, only for programs the validator proves batchable.

Requests whose feeds agree on every non-batch dim and dtype are concatenated along the batch
axis, run as ONE worker run (server/dispatch: `RemoteModel.run`, the pool's public API), and
the outputs are split back by rows. Batching happens before dispatch, so a batch costs one
IPC round trip and one `session.run` instead of one per request.

Dispatch (as Triton's dynamic batcher): `slots` batch threads (one per worker) each take a
batch, run it, answer it, and take the next. A batch closes when it holds `max_batch` rows
(or the largest preferred size), or when its oldest request has waited `max_queue_delay_us`
(0 by default: a lone request is never held). While every thread is busy, requests
accumulate, so batches grow with load by themselves, with no timer per request.

Cost (`batch_cap`): on CPU a batch costs about what its rows cost alone, and a request that
arrives while every batch thread runs a batch waits out a whole one. So a batch takes at most
the rows that add at most `max_run_s` (GRAPHGATE_BATCH_MAX_RUN_MS) to its run, or, under a
deep queue, QUEUE_SHARE of the time the queued rows keep the newest of them waiting anyway
(their cost spread over the batch threads: a share of a wait that is there either way, where
a larger batch's saved fixed parts shorten the whole wait), and at most half the time the most
pressed queued request has left before its deadline; at least one row.
When the ready rows cost more than that budget and other batch threads are idle, they are
shared among the idle threads instead of one thread taking them all. What a row adds
(`RowCost`, per batcher: one model version at this server's worker count) is the validator's
FLOPs per row at a nominal rate until the first run, then the slope of a line through the
measured runs (while they all had the same rows, the lower of their seconds per row and the
FLOPs figure). Cheap models (the image classifier: well under 1 ms a row) batch up to the
largest size; a large one a few rows a run (ResNet50 at 32 clients on 2 CPUs: 2.8-3 rows on
a quiet machine); a model whose one row is over the budget, by its measured runs and by its
FLOPs, is not queued at all: its requests run as unbatched ones do, their runs still measured
(`alone_is_better`), and it batches again if its rows get cheaper.
Whether batching pays at all: the measured line's fixed part (`RowCost.fixed`) is what a batch
saves per row it adds. Where runs of several rows cost at least what their rows cost in runs
of one (`RowCost.shares_nothing`: ResNet50 beside a busy process on 2 CPUs, -15 ms against
201 ms a row, where batches got 9 req/s against 11 unbatched), a batch only makes its members
wait for each other: the queue is handed to the pool as unbatched runs, in order (`_drain`),
and requests run unbatched until RECHECK_RUNS runs later, when they queue and batch again and
the line is drawn anew (each recheck that finds no fixed part again doubles the runs to the
next, up to MAX_RECHECK_RUNS, until a clear one, CLEAR_FIXED of a row, is found: a recheck
costs its batches' members some tail). A queue delay (`max_queue_delay_us`) ends early
enough for the most pressed request's deadline.

Answers: each member's response is encoded by the worker that ran the batch (server/dispatch/
answer.py), within the member's own answer budget; a batch's answers go back to the event loop
in one `call_soon_threadsafe` (`submit_answer`), so the loop wakes once per batch, not once per
request (the loop is one thread: its time per request caps throughput). An answer whose
waiter gave up is closed (its worker's lease given back). A request of 0 rows batches like any
other (its answer has 0 rows).

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
import bisect
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Final, TypeVar

import numpy as np

from executor.errors import DeadlineExceeded, RunCancelled
from server.dispatch.answer import Answer, AnswerSpec, member_rows
from server.dispatch.pool import Cancel, ModelLabel, RemoteModel, without_frames
from server.errors import ModelQuarantined, WorkerCrashed, WorkerOutOfMemory, WorkerUnavailable
from server.settings import Settings
from validator import Report

T = TypeVar("T")
Feeds = Mapping[str, np.ndarray]
Outputs = dict[str, np.ndarray]
# Failures that are the batch's, not one member's: every member gets them as they are.
_SHARED_FAILURES: Final = (
    WorkerCrashed,
    WorkerOutOfMemory,
    ModelQuarantined,
    WorkerUnavailable,
    DeadlineExceeded,
    RunCancelled,
)


def shared_rows(feeds: Feeds) -> int | None:
    """The rows a request brings to a batch: the leading dim every feed has; None when the
    feeds disagree on it or one is a scalar. Such a request is not rows of one batch: merged,
    its outputs would be split by one feed's rows and hand other requests' rows back."""
    leading = {int(array.shape[0]) if array.ndim else -1 for array in feeds.values()}
    if len(leading) != 1 or -1 in leading:
        return None
    return leading.pop()


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """How one model version batches. `max_batch` counts rows (0: no batching)."""

    max_batch: int = 32
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> BatchPolicy:
        """The default of every model version without an admin's override."""
        return cls(
            settings.batch_max_size,
            settings.batch_max_queue_delay_us,
            settings.batch_preferred_sizes,
        )

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


# What a batch's rows may add to its run, by default (GRAPHGATE_BATCH_MAX_RUN_MS's default).
DEFAULT_MAX_RUN_S: Final = Settings.model_fields["batch_max_run_ms"].default / 1e3
# FLOPs a worker is taken to run per second before a model's first run is measured: a
# conservative figure for one onnxruntime thread (ResNet50's 8.2 GFLOPs per row run in ~40 ms
# here, ~2e11/s), so an unmeasured model starts with small batches rather than large ones.
NOMINAL_FLOPS_PER_S: Final = 2e10
# What a batch may add to its run, beyond max_run_s, as a share of the time the queued rows
# keep the newest of them waiting anyway (each batch thread running rows one by one): under a
# deep queue, a batch of a few costly rows (ResNet50 at 32 clients on 2 CPUs: 2.3-2.8) whatever
# the machine's speed, where an absolute budget held one row on a slower machine and two on a
# faster one (0.91x against 1.05x the uncapped batcher's throughput, 2026-12-04).
QUEUE_SHARE: Final = 0.25
# Weight of one measured run in RowCost's moments; one run counts at most OUTLIER_FACTOR
# times the seconds its line expects, so a run preempted by another process on a loaded
# machine does not shrink the batches after it for long. Below MIN_ROWS_VARIANCE (rows^2)
# the runs' sizes differ too little to draw a line through.
COST_WEIGHT: Final = 0.1
OUTLIER_FACTOR: Final = 2.0
MIN_ROWS_VARIANCE: Final = 0.5
# Runs after which RowCost's finding that runs have no fixed part to share lapses, so that
# batches are tried, and the line drawn, again (the machine's load may have changed): 10-20 s
# of ResNet50's runs on 2 CPUs; a recheck costs a few batches, and the tail of the requests
# in them. Each recheck that finds no fixed part again doubles the runs to the next one, up
# to MAX_RECHECK_RUNS (ResNet50: 3-5 minutes); a clear fixed part (CLEAR_FIXED) starts over.
RECHECK_RUNS: Final = 200
MAX_RECHECK_RUNS: Final = 16 * RECHECK_RUNS
# A fixed part over this share of a row's seconds starts the rechecks' lapses over (ResNet50 on
# a quiet 2-CPU machine: 3%; beside a busy process: -7%, the few runs of a recheck +-20%).
CLEAR_FIXED: Final = 0.1


def batch_cap(
    *,
    ready_rows: int,
    max_rows: int,
    seconds_per_row: float,
    max_run_s: float,
    slack_s: float | None,
    idle_threads: int,
    threads: int = 1,
) -> int:
    """Rows the next batch may take (module docstring, "Cost"): what its rows add to its run
    (rows x `seconds_per_row`) fits the larger of `max_run_s` and QUEUE_SHARE of the wait the
    queue makes anyway (its rows spread over the `threads` batch threads), and half of
    `slack_s` (the time the most pressed queued request has left);
    ready rows that cost more than that budget are shared among the `idle_threads` batch
    threads (this one included). Never below 1: a request always runs, alone if need be."""
    waited = ready_rows * seconds_per_row / max(threads, 1)
    budget = max(max_run_s, QUEUE_SHARE * waited)
    if slack_s is not None:
        budget = min(budget, slack_s / 2)
    cap = max_rows if seconds_per_row <= 0 else min(max_rows, int(budget / seconds_per_row))
    if idle_threads > 1 and ready_rows * seconds_per_row > budget:
        cap = min(cap, -(-ready_rows // idle_threads))  # ceil: every ready row is taken
    return max(1, cap)


class RowCost:
    """The seconds each row adds to a run of a model in a worker (what batching costs the
    requests behind a batch: a run's fixed part, its round trip and the worker's wake-up, is
    paid by a lone request too). `prior` (from the validator's FLOPs) until runs are measured;
    then the slope of a least-squares line, seconds = fixed + rows x slope, through the runs
    seen: the first ones alike, then each weighted COST_WEIGHT against the ones before
    (exponentially weighted moments).
    While every run had the same rows (no slope to see), a run's seconds per row or the prior,
    whichever is lower: both are upper bounds of the slope (the first includes the run's fixed
    part; the prior's nominal rate understates a worker's).
    The line's fixed part, where runs of several sizes draw it, says whether batching pays at
    all (`shares_nothing`)."""

    def __init__(self, prior: float) -> None:
        self.prior = prior
        self.seconds = prior
        self.measured = 0
        self.fixed: float | None = None  # the line's fixed part, once runs of several sizes
        self._fixed_run = 0  # `measured` when it was last drawn
        self.recheck_runs = RECHECK_RUNS  # how long a finding of no fixed part holds
        self._rows = self._time = self._rows_var = self._covar = 0.0

    @classmethod
    def from_report(cls, report: Report) -> RowCost:
        return cls(report.flops_per_sample / NOMINAL_FLOPS_PER_S)

    def observe(self, rows: int, seconds: float) -> None:
        """One run of `rows` rows took `seconds` (several threads may call it at once: a
        lost update is a lost sample, and a float read is atomic)."""
        expected = self._time + self.seconds * (rows - self._rows)
        if self.measured and expected > 0:
            seconds = min(seconds, OUTLIER_FACTOR * expected)
        # The first runs as a plain mean (a session's first run, slow, counts 1/n), then
        # exponentially weighted.
        weight = max(COST_WEIGHT, 1 / (self.measured + 1))
        d_rows, d_time = rows - self._rows, seconds - self._time
        self._rows += weight * d_rows
        self._time += weight * d_time
        self._rows_var = (1 - weight) * (self._rows_var + weight * d_rows * d_rows)
        self._covar = (1 - weight) * (self._covar + weight * d_rows * d_time)
        self.measured += 1
        if self._rows_var >= MIN_ROWS_VARIANCE:
            self.seconds = max(0.0, self._covar / self._rows_var)
            self._draw_fixed(self._time - self.seconds * self._rows)
        else:  # two upper bounds of what a row adds: the lower one (a cold first run of a
            # session, slow, keeps no cheap model from batching)
            self.seconds = min(self._time / max(self._rows, 1.0), self.prior)

    @property
    def shares_nothing(self) -> bool:
        """Whether the runs drew a line with no fixed part: a run of several rows cost at
        least what its rows cost in runs of one, so a batch only makes its members wait for
        each other. Measured (ResNet50, 32 clients, 2 CPUs): +3 ms against 99 ms a row on a
        quiet machine; -15 ms against 201 ms beside a busy process, where batches lost to
        unbatched runs (9 against 11 req/s). Lapses `recheck_runs` runs after it was drawn."""
        fixed = self.fixed
        return fixed is not None and fixed <= 0 and not self._lapsed

    @property
    def _lapsed(self) -> bool:
        return self.measured - self._fixed_run >= self.recheck_runs

    def _draw_fixed(self, fixed: float) -> None:
        """The line's new fixed part. A recheck (the first line since a finding of none
        lapsed) that finds none again makes the next lapse come twice as late; a clear fixed
        part (over CLEAR_FIXED of a row) found at any time starts the lapses over. A small one
        batches, as any fixed part does, but leaves them as they are: beside a busy process the
        few runs a recheck draws its line from give a fixed part of either sign, and each
        recheck costs its batches' members their tail."""
        if fixed > CLEAR_FIXED * self.seconds:
            self.recheck_runs = RECHECK_RUNS
        elif self.fixed is not None and self.fixed <= 0 and self._lapsed:
            self.recheck_runs = min(2 * self.recheck_runs, MAX_RECHECK_RUNS)
        self.fixed = fixed
        self._fixed_run = self.measured


def proven_batchable(report: Report) -> bool:
    """The validator's batch-independence proof (validator/batch.py, `report.batchable`)."""
    return report.batchable


def batch_axis_everywhere(report: Report) -> bool:
    """Every input has a variable first dim: the axis requests are concatenated on."""
    return bool(report.inputs) and all(s.dims and s.dims[0] < 0 for s in report.inputs)


class _Item:
    """One queued request. Its outcome goes to `future` (a caller thread waits on it) or, for
    a request submitted from an event loop, to `waiter` on `loop` (see `_deliver`)."""

    __slots__ = (
        "answer",
        "arrived",
        "cancel",
        "deadline",
        "feeds",
        "finish",
        "future",
        "key",
        "loop",
        "rows",
        "source",
        "waiter",
        "weight",
    )

    def __init__(
        self,
        feeds: Feeds,
        finish: Callable[[Outputs], object],
        deadline: float | None,
        cancel: Cancel | None,
        source: str,
        loop: asyncio.AbstractEventLoop | None,
        answer: AnswerSpec | None = None,
    ) -> None:
        self.source = source
        self.feeds = feeds
        self.finish = finish
        self.answer = answer
        self.deadline = deadline
        self.cancel = cancel
        rows = shared_rows(feeds)
        if rows is None:  # our bug: the dispatcher runs such a request alone (shared_rows)
            raise ValueError("expected feeds that agree on their batch dim, got another request")
        self.rows = rows
        # What it counts for in the queue: a request of 0 rows still waits for a batch thread
        # (counted 0, no thread was ever woken for it, and it waited out its deadline).
        self.weight = max(self.rows, 1)
        # Requests batch together when their feeds agree past the batch axis and all want
        # answers encoded by the worker (or all want the outputs themselves).
        self.key = (
            answer is None,
            *((n, a.dtype.str, a.shape[1:]) for n, a in sorted(feeds.items())),
        )
        self.arrived = time.monotonic()
        self.loop = loop
        self.future: Future[object] | None = None if loop else Future()
        self.waiter: asyncio.Future[object] | None = loop.create_future() if loop else None

    @property
    def gone(self) -> bool:
        """The client left, or its waiter gave up (cancelled, or failed at its deadline)."""
        if self.cancel is not None and self.cancel.is_set():
            return True
        if self.waiter is not None:
            return self.waiter.done()  # a flag read: safe from any thread
        assert self.future is not None
        return self.future.cancelled()


# What a batch thread hands back per request: (request, succeeded, result or error).
_Outcome = tuple[_Item, bool, object]


class Batcher:
    """The queue of one model version and its `slots` batch threads (module docstring)."""

    def __init__(
        self,
        model: RemoteModel,
        label: ModelLabel | None,
        policy: BatchPolicy,
        slots: int,
        sizes: BatchSizes | None = None,
        max_run_s: float = DEFAULT_MAX_RUN_S,
    ) -> None:
        self.model = model
        self.label = label
        self.policy = policy
        self.max_run_s = max_run_s
        self._slots = slots
        self.cost = RowCost.from_report(model.program.report)
        self._idle = 0  # batch threads waiting for a batch (batch_cap shares rows among them)
        self._max_bytes = model.options.max_request_bytes
        self._sizes = sizes
        self._queues: dict[str, deque[_Item]] = {}  # insertion order: round-robin
        self._rows = 0
        self._cond = threading.Condition()
        self._closed = False
        self.batches = 0  # batches run, and the rows in them (metrics, benchmarks)
        self.batched_rows = 0
        self.recent: deque[tuple[str, ...]] = deque(maxlen=64)  # sources of recent batches
        # NOTE: each thread takes a batch, runs it and answers it, then takes the next: no
        # dispatcher thread in between (one thread wake-up per batch, not two), and requests
        # that arrive while every thread is busy make the next batches bigger by themselves.
        self._threads = [
            threading.Thread(target=self._serve, name=f"graphgate-batch-{i}", daemon=True)
            for i in range(slots)
        ]
        for thread in self._threads:
            thread.start()

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
        item = self._queue(_Item(feeds, finish, deadline, cancel, source, None))
        assert item.future is not None
        return item.future  # type: ignore[return-value]

    def submit_answer(
        self,
        feeds: Feeds,
        answer: AnswerSpec,
        *,
        source: str = "",
        deadline: float | None = None,
        cancel: Cancel | None = None,
        loop: asyncio.AbstractEventLoop,
    ) -> asyncio.Future[Answer]:
        """Queues one request whose answer its worker encodes (server/dispatch/answer.py),
        from the event loop `loop`: the answers of a batch come back to the loop in ONE call
        (a wake-up per batch, not per request); await it with `wait_async`."""
        item = self._queue(_Item(feeds, _same, deadline, cancel, source, loop, answer))
        assert item.waiter is not None
        return item.waiter  # type: ignore[return-value]

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
        """Takes no new requests; the queued ones still run (the threads drain, then end)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if wait:
            for thread in self._threads:
                thread.join(5.0)

    def _queue(self, item: _Item) -> _Item:
        # Before queueing: a batch thread that takes the item at once sets its own callback
        # (`_run_together`), which this must not overwrite. A cancel that fires before the
        # item is queued finds nothing to remove; the item is then `gone` and dropped.
        if item.cancel is not None:
            item.cancel.on_cancel(lambda: self._cancelled(item))
        with self._cond:
            if self._closed:
                raise WorkerUnavailable("the server is shutting down")
            self._queues.setdefault(item.source, deque()).append(item)
            before, self._rows = self._rows, self._rows + item.weight
            # Wakes a batch thread only when one may act: the queue was empty (an idle thread
            # waits for it) or a filling batch just reached its size. Not on every arrival: a
            # wake-up is a thread switch and a GIL handover, paid on the event loop's core.
            if not before or before < self.policy.target <= self._rows:
                self._cond.notify()
        return item

    # -- taking batches (any batch thread, holding the lock) -------------------------------

    def _serve(self) -> None:
        while (batch := self._next_batch()) is not None:
            if batch:
                self.recent.append(tuple(item.source for item in batch))
                self._run(batch)

    def _next_batch(self) -> list[_Item] | None:
        """Waits for requests, then for the batch to fill or its oldest to wait long enough;
        None once closed and drained."""
        delay = self.policy.max_queue_delay_us / 1e6
        with self._cond:
            self._idle += 1
            try:
                while not self._rows and not self._closed:
                    self._cond.wait()
                if not self._rows:
                    return None
                if delay:
                    self._wait_to_fill(delay)
                dropped: list[_Outcome] = []
                batch = self._take(dropped, self._cap(self._tightest_deadline()))
            finally:
                self._idle -= 1
            if self._rows:  # more than one batch is waiting: another idle thread takes it
                self._cond.notify()
        _deliver(dropped)
        return batch

    def _wait_to_fill(self, delay: float) -> None:
        """Holds the batch for more rows until its oldest request has waited `delay`, it
        reaches its size or its cost cap, or holding it longer would let the most pressed
        request's deadline pass before its run is expected to end."""
        oldest = min(q[0].arrived for q in self._queues.values() if q)
        close_at = oldest + delay
        while not self._closed:
            pressed = self._tightest_deadline()
            if pressed is not None:
                close_at = min(close_at, pressed - self.cost.seconds)
            left = close_at - time.monotonic()
            if left <= 0 or self._rows >= min(self.policy.target, self._cap(pressed)):
                return
            self._cond.wait(left)

    def _tightest_deadline(self) -> float | None:
        """The earliest deadline among the queued requests (a scan: queues hold tens)."""
        return min(
            (i.deadline for q in self._queues.values() for i in q if i.deadline is not None),
            default=None,
        )

    def _cap(self, pressed: float | None) -> int:
        """batch_cap for the queue as it is now, `pressed` its earliest deadline."""
        return batch_cap(
            ready_rows=self._rows,
            max_rows=self.policy.max_batch,
            seconds_per_row=self.cost.seconds,
            max_run_s=self.max_run_s,
            slack_s=None if pressed is None else pressed - time.monotonic(),
            idle_threads=self._idle,
            threads=self._slots,
        )

    def _take(self, dropped: list[_Outcome], cap: int) -> list[_Item]:
        """Round-robin over sources, heads only (each source stays FIFO), same dims as the
        first, at most `cap` rows; members that left or expired go to `dropped`."""
        now = time.monotonic()
        limit = self._limit(cap)
        taken: list[_Item] = []
        rows = nbytes = 0
        key: tuple[object, ...] | None = None
        progress = True
        while progress:
            progress = False
            for source in list(self._queues):
                queue = self._queues[source]
                item = self._pop_live(queue, now, dropped)
                if item is None:
                    del self._queues[source]
                    continue
                size = _nbytes(item.feeds)
                fits = rows + item.weight <= limit and nbytes + size <= self._max_bytes
                if taken and (item.key != key or not fits):
                    queue.appendleft(item)
                    continue
                taken.append(item)
                key, rows, nbytes = item.key, rows + item.weight, nbytes + size
                self._rows -= item.weight
                self._queues[source] = self._queues.pop(source)  # served: to the back
                progress = rows < limit
        return taken

    def _limit(self, cap: int) -> int:
        """Rows of the batch about to close: the largest preferred size that is ready, else
        everything ready up to `cap` (at most max_batch)."""
        ready = min(self._rows, cap)
        fitting = [size for size in self.policy.preferred_batch_sizes if size <= ready]
        return max(fitting, default=ready)

    def _pop_live(self, queue: deque[_Item], now: float, dropped: list[_Outcome]) -> _Item | None:
        while queue:
            item = queue.popleft()
            if item.gone:
                self._rows -= item.weight
                error: Exception = RunCancelled("the client went away while the request was queued")
                dropped.append((item, False, error))
            elif item.deadline is not None and now >= item.deadline:
                self._rows -= item.weight
                error = DeadlineExceeded("the request waited for a batch past its deadline")
                dropped.append((item, False, error))
            else:
                return item
        return None

    def _cancelled(self, item: _Item) -> None:
        """A queued request whose client left fails now, not when a worker frees up."""
        with self._cond:
            for queue in self._queues.values():
                if item in queue:
                    queue.remove(item)
                    self._rows -= item.weight
                    break
            else:
                return  # running, or done
        error = RunCancelled("the client went away while the request was queued")
        _deliver([(item, False, error)])

    # -- running a batch (its batch thread, without the lock) ------------------------------

    def _run(self, batch: list[_Item]) -> None:
        outcomes = [self._run_alone(batch[0])] if len(batch) == 1 else self._run_together(batch)
        _deliver(outcomes)

    def _run_alone(self, item: _Item) -> _Outcome:
        self._observe(item.rows)
        try:
            if item.answer is not None:
                [answer] = self.model.answer(
                    item.feeds,
                    [item.answer],
                    [item.rows],
                    deadline=item.deadline,
                    cancelled=item.cancel,
                    label=self.label,
                    ran=self._ran(item.rows),
                )
            else:
                outputs = self.model.run(
                    item.feeds,
                    deadline=item.deadline,
                    cancelled=item.cancel,
                    label=self.label,
                    ran=self._ran(item.rows),
                )
        except BaseException as error:
            return item, False, error
        self._count(item.rows)
        if item.answer is not None:
            return item, not isinstance(answer, Exception), answer
        return _finish(item, outputs)

    def _run_together(self, batch: list[_Item]) -> list[_Outcome]:
        names = list(batch[0].feeds)
        feeds = {n: np.concatenate([item.feeds[n] for item in batch]) for n in names}
        together = Cancel()
        for item in batch:
            if item.cancel is not None:
                item.cancel.on_cancel(lambda: _all_gone(batch, together))
        deadlines = [item.deadline for item in batch]
        deadline = None if None in deadlines else max(d for d in deadlines if d is not None)
        rows = sum(item.rows for item in batch)
        self._observe(rows)
        if batch[0].answer is not None:
            return self._answer_together(batch, feeds, deadline, together, rows)
        try:
            outputs = self.model.run(
                feeds, deadline=deadline, cancelled=together, label=self.label, ran=self._ran(rows)
            )
            parts = member_rows(outputs, [item.rows for item in batch])
        except _SHARED_FAILURES as error:
            return [(item, False, error) for item in batch]
        except Exception:  # one member's fault, or a batch over a budget: each on its own
            parts = None
        if parts is None:
            return [self._run_alone(item) for item in batch]
        self._count(rows)
        return [_finish(item, part) for item, part in zip(batch, parts, strict=True)]

    def _answer_together(
        self, batch: list[_Item], feeds: Feeds, deadline: float | None, together: Cancel, rows: int
    ) -> list[_Outcome]:
        """One run for the batch, each member's answer encoded by the worker."""
        specs = [item.answer for item in batch if item.answer is not None]
        try:
            answers = self.model.answer(
                feeds,
                specs,
                [item.rows for item in batch],
                deadline=deadline,
                cancelled=together,
                label=self.label,
                ran=self._ran(rows),
            )
        except _SHARED_FAILURES as error:
            return [(item, False, error) for item in batch]
        except Exception:  # one member's fault, or a member over a budget: each on its own
            return [self._run_alone(item) for item in batch]
        self._count(rows)
        return [
            (item, not isinstance(answer, Exception), answer)
            for item, answer in zip(batch, answers, strict=True)
        ]

    def _ran(self, rows: int) -> Callable[[float], None]:
        """What the pool tells a run's seconds to: this model's cost per row."""
        return lambda seconds: self.cost.observe(rows, seconds)

    def alone_is_better(self, rows: int) -> Callable[[float], None] | None:
        """For a request of `rows` rows that should not wait for a batch: what to tell its
        unbatched run's seconds to, so the cost keeps being measured, and its run counted in
        the batch sizes; None when it should queue here. Two cases:
        - the model's runs share no fixed part (`RowCost.shares_nothing`): the queue is
          drained first (`_drain`);
        - its one row alone is over the budget and nothing is queued: such a batch would be
          one row anyway, and the batch thread's hand-offs between runs leave a worker idle
          (ResNet50 at 32 clients: 18-19 req/s batched one row a run, against 22-24
          unbatched, in the same run). The validator's FLOPs (at a nominal rate that
          overstates a row's time) must say so too: runs of one row measure its fixed part
          as well, so a cheap model that a loaded machine slows stays with the batcher."""
        if self.cost.shares_nothing:
            self._drain()
        else:
            over = min(self.cost.seconds, self.cost.prior) > self.max_run_s  # the 2nd case
            if not over or self._rows:
                return None
        self._observe(rows)
        return self._ran(rows)

    def _drain(self) -> None:
        """Every queued request goes to the pool as an unbatched run, in the order they came,
        ahead of the caller's: its model's runs share no fixed part, and a request left in
        the queue would wait for a batch thread behind every unbatched one (measured: one
        request in a hundred 9.6 s, against 3.1 s unbatched). Runs of one row through the
        batch threads lost as batches did (ResNet50 beside a busy process: 9.3 req/s at 1.2
        rows a run against 10.8 unbatched)."""
        with self._cond:
            if not self._rows:
                return
            now = time.monotonic()
            dropped: list[_Outcome] = []
            items: list[_Item] = []
            for queue in self._queues.values():
                while (item := self._pop_live(queue, now, dropped)) is not None:
                    self._rows -= item.weight
                    items.append(item)
            self._queues.clear()
        _deliver(dropped)
        for item in sorted(items, key=lambda queued: queued.arrived):
            name = "graphgate-drained"
            threading.Thread(target=self._run, args=([item],), name=name, daemon=True).start()

    def _observe(self, rows: int) -> None:
        if self._sizes is not None and self.label is not None:
            self._sizes.observe(self.label, rows)

    def _count(self, rows: int) -> None:
        with self._cond:
            self.batches += 1
            self.batched_rows += rows


class BatchSizes:
    """Rows per run of every batching model version, as histogram buckets: the batch sizes
    actually achieved (Prometheus `graphgate_batch_size`, server/http/metrics.py). Kept by label,
    not by batcher, so a version whose policy changes keeps counting up."""

    BOUNDS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

    def __init__(self) -> None:
        self._counts: dict[ModelLabel, list[int]] = {}  # per bound, then +Inf
        self._sums: dict[ModelLabel, int] = {}
        self._lock = threading.Lock()

    def observe(self, label: ModelLabel, rows: int) -> None:
        slot = bisect.bisect_left(self.BOUNDS, rows)
        with self._lock:
            counts = self._counts.get(label)
            if counts is None:
                counts = self._counts[label] = [0] * (len(self.BOUNDS) + 1)
            counts[slot] += 1
            self._sums[label] = self._sums.get(label, 0) + rows

    def forget(self, tenant_id: str, name: str, version: int | None = None) -> None:
        """Drops the series of a deleted version (`version` None: of every version of `name`)."""
        with self._lock:
            for label in [k for k in self._counts if k[:2] == (tenant_id, name)]:
                if version is None or label[2] == version:
                    del self._counts[label]
                    self._sums.pop(label, None)

    def snapshot(self) -> dict[ModelLabel, tuple[list[int], int]]:
        """ModelLabel -> (count per bucket, not cumulative; the +Inf one last), sum of rows."""
        with self._lock:
            return {label: (list(c), self._sums[label]) for label, c in self._counts.items()}


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
        max_run_s: float = DEFAULT_MAX_RUN_S,
    ) -> None:
        self.policy = policy
        self._slots = slots
        self._max_run_s = max_run_s
        self._batchable = batchable
        self._batchers: dict[tuple[object, ...], Batcher] = {}
        # (label, content key) -> (the override it was chosen with, its batcher or None): the
        # choice made once per loaded version, not re-derived from its report per request.
        self._chosen: dict[tuple[object, ...], tuple[object, Batcher | None]] = {}
        self._lock = threading.Lock()
        self.sizes = BatchSizes()

    def policy_for(
        self, report: Report, override: Mapping[str, object] | None = None
    ) -> BatchPolicy | None:
        """The policy this model batches with, or None when it does not batch."""
        if not (self._batchable(report) and batch_axis_everywhere(report)):
            return None
        policy = self.policy if override is None else BatchPolicy.from_json(override)
        return policy if policy.max_batch > 1 else None

    def for_model(
        self, model: RemoteModel, label: ModelLabel, override: Mapping[str, object] | None = None
    ) -> Batcher | None:
        """The version's batcher (None when it does not batch). A loaded version keeps its
        override object, so the same object means the same choice as last time."""
        chosen = self._chosen.get((*label, model.key))
        if chosen is not None and chosen[0] is override:
            return chosen[1]
        batcher = self._choose(model, label, override)
        self._chosen[(*label, model.key)] = (override, batcher)
        return batcher

    def _choose(
        self, model: RemoteModel, label: ModelLabel, override: Mapping[str, object] | None
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
            batcher = Batcher(model, label, policy, self._slots, self.sizes, self._max_run_s)
            self._batchers[key] = batcher
            return batcher

    def row_seconds(self) -> dict[ModelLabel, float]:
        """What a row adds to a run, per batching version (RowCost; metrics)."""
        with self._lock:
            batchers = list(self._batchers.values())
        return {b.label: b.cost.seconds for b in batchers if b.label is not None}

    def close(self) -> None:
        with self._lock:
            batchers, self._batchers = list(self._batchers.values()), {}
            self._chosen.clear()
        for batcher in batchers:
            batcher.close()


async def wait_async(waiter: asyncio.Future[T], deadline: float | None) -> T:
    """Awaits a `submit_answer` answer; DeadlineExceeded at `deadline` (the batch may run on).
    A plain timer on the loop, not `asyncio.wait_for` (a task and two futures a request)."""
    timer = None
    if deadline is not None:
        loop = asyncio.get_running_loop()
        timer = loop.call_later(max(0.0, deadline - time.monotonic()), _expire, waiter)
    try:
        return await waiter
    finally:
        if timer is not None:
            timer.cancel()


def _expire(waiter: asyncio.Future[T]) -> None:
    if not waiter.done():
        waiter.set_exception(DeadlineExceeded("the request ran past its deadline and was stopped"))


def wait(future: Future[T], deadline: float | None) -> T:
    """The future's result, or DeadlineExceeded at `deadline` (the batch may run on)."""
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        return future.result(timeout)
    except TimeoutError:
        raise DeadlineExceeded("the request ran past its deadline and was stopped") from None


def _all_gone(batch: list[_Item], together: Cancel) -> None:
    if all(item.gone for item in batch):
        together.set()


def _nbytes(feeds: Feeds) -> int:
    return sum(int(a.nbytes) for a in feeds.values())


def _same(outputs: Outputs) -> Outputs:
    return outputs


def _finish(item: _Item, outputs: Outputs) -> _Outcome:
    """The request's answer, made on the batch thread (its encoded response)."""
    try:
        return item, True, item.finish(outputs)
    except BaseException as error:
        return item, False, error


def _deliver(outcomes: list[_Outcome]) -> None:
    """Hands outcomes to their waiters: a caller thread's future directly, an event loop's
    in one `call_soon_threadsafe` per loop for the whole batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        item, ok, value = outcome
        if isinstance(value, BaseException):  # raised on this thread: see without_frames
            without_frames(value)
        if item.cancel is not None:  # its callback refers to the item (and its batch): a
            item.cancel.on_cancel(None)  # cycle per request, left to the garbage collector
        if item.loop is not None:
            by_loop.setdefault(item.loop, []).append(outcome)
            continue
        assert item.future is not None
        try:
            if ok:
                item.future.set_result(value)
            else:
                assert isinstance(value, BaseException)
                item.future.set_exception(value)
        except InvalidStateError:  # its waiter gave up meanwhile
            _discard(value)
    for loop, answered in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, answered)


def _discard(value: object) -> None:
    """An answer nobody waits for any more: its worker's lease given back."""
    if isinstance(value, Answer):
        value.close()


def _settle(outcomes: list[_Outcome]) -> None:
    """On the event loop: resolves every waiter of a batch (skipping those already done)."""
    for item, ok, value in outcomes:
        waiter = item.waiter
        if waiter is None or waiter.done():
            _discard(value)
            continue
        if ok:
            waiter.set_result(value)
        else:
            assert isinstance(value, BaseException)
            waiter.set_exception(value)
