"""The worker pool: starts, supervises and replaces worker processes; the server's only way
to compile or run a model.

One request per worker at a time, over a pipe; an idle queue hands workers to requests. A
worker that dies mid-request fails that request alone (WorkerCrashed) and is replaced; the
model version it ran is charged a crash, and `quarantine_crashes` of them within
`quarantine_window_s` quarantine it (ModelQuarantined until an admin releases it).
NOTE: deadlines are time.monotonic() values: CLOCK_MONOTONIC, the same in every process here.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import numpy as np

from executor import RunCancel, SessionOptions
from executor.errors import DeadlineExceeded, RunCancelled
from server.dispatch.answer import Answer, AnswerSpec, Encoded
from server.dispatch.arena import Arena, Spill
from server.dispatch.signing import Provenance, SignatureCheck
from server.dispatch.worker import EXIT_OOM, DeclaredDims, WorkerConfig, main
from server.errors import (
    CompileTimeout,
    ModelQuarantined,
    WorkerCrashed,
    WorkerOutOfMemory,
)
from server.settings import Settings
from server.storage.spool import Spooled
from validator import Policy, Report, TensorSpec

log = logging.getLogger("graphgate.workers")

# A run past its deadline is stopped by onnxruntime between nodes; one still busy this long
# after it is stuck in a single native call, and its worker is killed.
_HARD_STOP_GRACE_S: Final = 5.0
_POLL_S: Final = 0.05
# The content keys remembered per worker as held (the most recently used; see _Worker.holds).
_HELD_KEYS_KEPT: Final = 4096
# Answers at most this big together are copied out of the arena into memory; bigger ones go to
# files of their own and are streamed from there (the server never holds a whole large answer).
COPY_MAX_BYTES: Final = (
    1024 * 1024
)  # how often a request waiting for a worker looks at its cancel flag

# (tenant, model name, version): what a quarantine names and batching metrics count
ModelLabel = tuple[str, str, int]
# Told the seconds a run took in its worker (IPC, run and encoding; neither the wait for a
# worker nor a load of the model): the batcher's cost per row (batching.RowCost).
Ran = Callable[[float], None]
_MIB: Final = 1024**2
T = TypeVar("T")
# glibc's malloc asks the kernel for transparent huge pages (madvise) on the blocks it maps, in
# the workers: their big buffers (a model's serialized ONNX, onnxruntime's copies of its
# weights, an answer) are faulted in 2 MiB at a time instead of 4 KiB. Measured on ResNet50
# (102 MB of weights): a fresh 100 MB buffer touched in 0.02-0.03 s instead of 0.15-0.2 s.
_WORKER_MALLOC: Final = "glibc.malloc.hugetlb=1"


class KeyedLocks:
    """A lock per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[Hashable, tuple[threading.Lock, int]] = {}  # key -> lock, users

    @contextlib.contextmanager
    def held(self, key: Hashable) -> Iterator[None]:
        with self._lock:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._lock:
                users = self._locks[key][1] - 1
                if users:
                    self._locks[key] = (lock, users)
                else:
                    del self._locks[key]


class LoadQueue(Protocol):
    """Where a model a worker lacks is compiled into one: `work` run in `tenant`'s turn, under
    its compile cap (services' CompileQueue.run_blocking)."""

    def __call__(self, tenant: str, work: Callable[[], T], /) -> T: ...


def in_place(_tenant: str, work: Callable[[], T], /) -> T:
    """A LoadQueue with no queue: `work` at once, in the caller's thread."""
    return work()


def _default(name: str) -> Any:
    """A setting's default, written once in server/settings.py."""
    return Settings.model_fields[name].default


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """The pool's part of the settings; its defaults are the settings' own."""

    workers: int = _default("workers")
    memory_cap_bytes: int = _default("worker_memory_mb") * _MIB
    session_cache_bytes: int = _default("worker_session_cache_mb") * _MIB
    arena_bytes: int = 4 * _MIB
    compile_timeout_s: float = _default("compile_timeout_s")
    compile_nice: int = _default("compile_nice")  # nice steps for a compile's lowering (worker.py)
    quarantine_crashes: int = _default("quarantine_crashes")
    quarantine_window_s: float = _default("quarantine_window_s")

    @classmethod
    def from_settings(cls, settings: Settings) -> PoolSettings:
        return cls(
            workers=settings.workers,
            memory_cap_bytes=settings.worker_memory_mb * _MIB,
            session_cache_bytes=settings.worker_session_cache_mb * _MIB,
            compile_timeout_s=settings.compile_timeout_s,
            compile_nice=settings.compile_nice,
            quarantine_crashes=settings.quarantine_crashes,
            quarantine_window_s=settings.quarantine_window_s,
        )


@dataclass(frozen=True, slots=True)
class Signature:
    """What the server process knows of a compiled program: its report (inputs, outputs and
    cost figures); the program itself lives in the workers."""

    report: Report

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.report.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.report.outputs


@dataclass(frozen=True, eq=False)
class RemoteModel:
    """A model compiled in the workers: `run` sends the feeds to one of them. `source` reads
    the program and params again (from storage) for a worker that has not loaded it yet. The
    lowered ONNX never comes to the server's memory: a compile asked for it writes it to a
    file (`WorkerPool.compile`'s `onnx_to`)."""

    program: Signature
    key: str
    source: Callable[[], tuple[bytes, bytes | None]]
    policy: Policy
    options: SessionOptions
    pool: WorkerPool
    # Who signed the bytes this compile verified (a signed upload's); None: not checked.
    provenance: Provenance | None = None
    # The upload's declared dims (sorted): a worker that loads the model validates at them too.
    dims: DeclaredDims = ()

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        deadline: float | None = None,
        cancelled: Cancel | None = None,
        label: ModelLabel | None = None,
        ran: Ran | None = None,
    ) -> dict[str, np.ndarray]:
        """Runs in a worker; `label` (tenant, name, version) is charged if the worker dies;
        `ran` is told the run's seconds (see `Ran`)."""
        return self.pool.run(
            self, feeds, deadline=deadline, cancelled=cancelled, label=label, ran=ran
        )

    def answer(
        self,
        feeds: Mapping[str, np.ndarray],
        answers: Sequence[AnswerSpec],
        rows: Sequence[int],
        *,
        deadline: float | None = None,
        cancelled: Cancel | None = None,
        label: ModelLabel | None = None,
        ran: Ran | None = None,
    ) -> list[Answer | Exception]:
        """Runs in a worker, which encodes each answer (`rows` per batch member); see
        `WorkerPool.answer`."""
        return self.pool.answer(
            self,
            feeds,
            answers,
            rows,
            deadline=deadline,
            cancelled=cancelled,
            label=label,
            ran=ran,
        )


@dataclass(frozen=True, slots=True)
class Digests:
    """The sha256 of a program and its params, computed once per upload: the artifacts'
    names in storage and, with the policy, the compiled model's key in the workers."""

    program: str
    params: str | None

    @classmethod
    def of(cls, program: Blob, params: Blob | None) -> Digests:
        """The digests of the bytes, or of spool files those they were hashed with as they
        were written (nothing read again)."""
        return cls(sha256_of(program), None if params is None else sha256_of(params))


# An upload's program or params: bytes in memory, or a spool file (the HTTP upload's, hashed as
# it streamed in: server/storage/spool.py), which the worker reads and maps itself.
Blob = bytes | Spooled


def sha256_of(blob: Blob) -> str:
    return blob.sha256 if isinstance(blob, Spooled) else hashlib.sha256(blob).hexdigest()


def size_of(blob: Blob) -> int:
    return blob.size if isinstance(blob, Spooled) else len(blob)


def _taken_all(arena: Arena, found: list[Encoded | Exception]) -> list[Answer | Exception]:
    """A run's answers out of the worker's arena (errors left as they are): into memory when
    they are small together, else each into its own file."""
    answers = [e for e in found if isinstance(e, Encoded)]
    if not answers or sum(e.length for e in answers) > COPY_MAX_BYTES:
        return [e if isinstance(e, Exception) else _spilled(arena, e) for e in found]
    # One read for the batch, sliced per member (the worker wrote them one after the other):
    # a read lets go of the GIL, and a read per member cost the batch thread a GIL handover
    # each, against the event loop.
    start = min(e.offset for e in answers)
    block = arena.pread(start, max(e.offset + e.length for e in answers) - start)
    taken: list[Answer | Exception] = []
    for e in found:
        if isinstance(e, Exception):
            taken.append(e)
            continue
        at = e.offset - start
        taken.append(Answer(e.length, e.header_length, data=block[at : at + e.length]))
    return taken


def _spilled(arena: Arena, encoded: Encoded) -> Answer:
    spill = Spill.copy(arena, encoded.offset, encoded.length)
    return Answer(encoded.length, encoded.header_length, read=spill.pread, on_close=spill.close)


def without_frames(error: BaseException) -> BaseException:
    """`error` with its traceback dropped, and those of the errors it chains: for an error
    handed from the thread that raised it to another (the event loop, a batch's waiter).

    NOTE: those frames hold the request (its body, its feeds), and some hold the error too
    (`_check`'s reply, a caller's outcome): a reference cycle, freed only when the cyclic
    garbage collector next runs, which an idle server may not do for minutes (each cancelled
    62 MB request left its body and feeds, 122 MB, behind). The receiver raises the error
    without them anyway."""
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        pending += [current.__cause__, current.__context__]
    return error


def content_key(digests: Digests, policy: Policy, dims: DeclaredDims = ()) -> str:
    """What a worker keeps a compiled model under: its bytes' digests, the policy and the
    declared dims (the same bytes at other bounds are another model: other budgets, checks)."""
    text = f"{digests.program}:{digests.params or ''}:{policy!r}"
    if dims:
        text += f":{dims!r}"
    return hashlib.sha256(text.encode()).hexdigest()


def declared(dims: Mapping[str, int] | None) -> DeclaredDims:
    """Declared dims as a key: sorted (name, size) pairs."""
    return tuple(sorted((dims or {}).items()))


# Set by the route when the client goes away: a queued request stops waiting, a running one
# is stopped by its worker (told over the worker's cancel pipe). One mechanism for both
# layers: the worker stops its run with the same class.
Cancel = RunCancel
# One run's arguments, as _run_on takes them: the model, its feeds, deadline, cancel, the
# answers to encode (None: the outputs themselves), the rows of each batch member, the label
# charged if the worker dies, and who is told the run's seconds.
_Run = tuple[
    RemoteModel,
    Mapping[str, np.ndarray],
    float | None,
    Cancel | None,
    tuple[AnswerSpec, ...] | None,
    Sequence[int],
    ModelLabel | None,
    Ran | None,
]


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """One worker's compiled sessions: content key -> (bytes it costs, provider)."""

    pid: int
    cached_bytes: int
    rss_bytes: int
    sessions: dict[str, tuple[int, str]]


class _Died(Exception):
    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"exit status {exitcode}")
        self.exitcode = exitcode


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection
    cancels: Connection  # the write end of the worker's cancel pipe
    arena: Arena
    arena_path: Path
    ready: bool = False
    _cancel_lock: threading.Lock = field(default_factory=threading.Lock)
    # The content keys this worker was last seen holding compiled (a run, a compile or a load
    # of them went through); it may have evicted some since ("missing" then drops them).
    holds: _Recent = field(default_factory=lambda: _Recent(_HELD_KEYS_KEPT))

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def call(self, message: tuple[Any, ...], timeout: float | None) -> tuple[Any, ...]:
        """Sends a message, waits for its answer; _Died if the worker dies, TimeoutError."""
        try:
            self._wait_ready()
            self.conn.send(message)
            if not self.conn.poll(timeout):
                raise TimeoutError
            reply: tuple[Any, ...] = self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self.process.join(1.0)
            raise _Died(self.process.exitcode) from None
        if reply[0] == "oom":
            self.process.join(5.0)
            raise _Died(EXIT_OOM)
        return reply

    def cancel(self, seq: int) -> None:
        """Asks the worker to stop request `seq` (any thread: the disconnect's, a batch's)."""
        # OSError: the worker is gone; its request fails as a crash or was already answered.
        with self._cancel_lock, contextlib.suppress(OSError):
            self.cancels.send(seq)

    def _wait_ready(self) -> None:
        if self.ready:
            return
        self.conn.recv()  # ("ready", 0, pid): the arena is mapped there, its name can go
        self.arena_path.unlink(missing_ok=True)
        self.ready = True

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)
        self.conn.close()
        self.cancels.close()
        self.arena.close()
        self.arena_path.unlink(missing_ok=True)


class Quarantine:
    """Crashes per model version within a window; past the count the version is quarantined."""

    def __init__(self, crashes: int, window_s: float) -> None:
        self._crashes = crashes
        self._window_s = window_s
        self._seen: dict[ModelLabel, list[float]] = {}
        self._held: set[ModelLabel] = set()
        self._lock = threading.Lock()

    def crashed(self, label: ModelLabel) -> bool:
        """Records a crash; True when it quarantines the version."""
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._seen.get(label, []) if now - t < self._window_s]
            recent.append(now)
            self._seen[label] = recent
            if len(recent) >= self._crashes:
                self._held.add(label)
                return True
            return False

    def holds(self, label: ModelLabel) -> bool:
        return label in self._held

    def held(self) -> list[ModelLabel]:
        with self._lock:
            return sorted(self._held)

    def release(self, label: ModelLabel) -> bool:
        with self._lock:
            self._seen.pop(label, None)
            if label in self._held:
                self._held.discard(label)
                return True
            return False


class _Recent:
    """A set of the last `size` keys added (older ones forgotten first)."""

    __slots__ = ("_keys", "_size")

    def __init__(self, size: int) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def add(self, key: str) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self._size:
            self._keys.popitem(last=False)

    def discard(self, key: str) -> None:
        self._keys.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._keys


class _Waiter:
    __slots__ = ("event", "worker")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.worker: _Worker | None = None


class _OnFailure:
    """WorkerPool._released_on_failure's context.

    NOTE: a class, not a contextlib.contextmanager generator: every request enters two of
    these, and a generator's context costs several Python calls each time."""

    __slots__ = ("_label", "_pool", "_worker")

    def __init__(self, pool: WorkerPool, worker: _Worker, label: ModelLabel | None) -> None:
        self._pool = pool
        self._worker = worker
        self._label = label

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if error is None:
            return
        pool, worker = self._pool, self._worker
        if isinstance(error, _Died):
            raise pool._replace(worker, error, self._label) from None
        if isinstance(error, TimeoutError):  # stuck in one native call past the deadline
            pool._replace(worker, _Died(None), None)
            raise DeadlineExceeded("the request ran past its deadline and was stopped") from None
        pool._idle.put(worker)  # any other error: the worker is fine, and idle again


class _Handoff:
    """The idle workers, handed to waiting requests oldest first.

    An idle worker is taken most recently freed first: its caches and onnxruntime's threads
    are still warm (ResNet50 at one caller: 89% -> 94% of in-process throughput; taken in
    turn, every request ran on the worker that had sat idle longest).

    NOTE: not a queue.Queue: its waiters re-poll every _POLL_S (to see a cancel) and each
    re-poll put the waiter at the back of the Condition's line, while a request arriving as a
    worker came free took it ahead of them all; with 32 requests on 2 workers that made the p99
    ~10x the p50 (requests waiting out several 50 ms polls). Here a freed worker goes to the
    oldest waiter directly, and a newcomer waits behind those already waiting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: deque[_Worker] = deque()
        self._waiters: deque[_Waiter] = deque()

    def put(self, worker: _Worker) -> None:
        with self._lock:
            if self._waiters:
                waiter = self._waiters.popleft()
                waiter.worker = worker
                waiter.event.set()
                return
            self._idle.append(worker)

    def get(self, give_up: Callable[[], None], key: str | None = None) -> _Worker:
        """A worker, in arrival order; `give_up()` is called every _POLL_S while waiting and
        ends the wait by raising. Of several idle ones, one that holds the model `key`.

        NOTE: the most recently freed worker is often not the one holding the model: a
        tenant's request to a model that worker lacked loaded it there (a compile: tens of ms
        of a CPU, which another tenant's requests waited for) while the worker holding it sat
        idle."""
        with self._lock:
            if self._idle:  # none waits: a waiter would have been handed this worker
                return self._take(key)
            waiter = _Waiter()
            self._waiters.append(waiter)
        while not waiter.event.wait(_POLL_S):
            try:
                give_up()
            except BaseException:
                with self._lock:
                    if waiter.worker is None:
                        self._waiters.remove(waiter)
                        raise
                break  # handed a worker as it gave up: take it
        assert waiter.worker is not None
        return waiter.worker

    def _take(self, key: str | None) -> _Worker:
        """The most recently freed idle worker holding `key`, else the most recently freed
        (see the class's note)."""
        if key is not None and len(self._idle) > 1:
            for index in range(len(self._idle) - 1, -1, -1):
                worker = self._idle[index]
                if key in worker.holds:
                    del self._idle[index]
                    return worker
        return self._idle.pop()

    def take_idle(self) -> list[_Worker]:
        """Every idle worker, now (none waits for them)."""
        with self._lock:
            taken, self._idle = list(self._idle), deque()
        return taken

    def idle_ids(self) -> set[int]:
        with self._lock:
            return {id(w) for w in self._idle}


def _fork_server_started() -> None:
    """Starts multiprocessing's fork server, the workers' parent, with _WORKER_MALLOC in its
    environment (glibc reads its tunables when a process starts: the workers it forks have
    them). The server's own environment is left as it was."""
    before = os.environ.get("GLIBC_TUNABLES")
    if before is None or "glibc.malloc.hugetlb" not in before:  # the operator's choice wins
        os.environ["GLIBC_TUNABLES"] = ":".join(filter(None, [before, _WORKER_MALLOC]))
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if before is None:
            os.environ.pop("GLIBC_TUNABLES", None)
        else:
            os.environ["GLIBC_TUNABLES"] = before


class WorkerPool:
    def __init__(self, settings: PoolSettings = PoolSettings()) -> None:
        self.settings = settings
        self.quarantine = Quarantine(settings.quarantine_crashes, settings.quarantine_window_s)
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["server.dispatch.worker"])
        self._idle = _Handoff()
        self._workers: set[_Worker] = set()
        self._lock = threading.Lock()
        self._started = False
        self._seq = itertools.count(1)
        self._load_queue: LoadQueue = in_place
        self._loads = KeyedLocks()  # by content key: one load of a model at a time

    def queue_loads(self, queue: LoadQueue) -> None:
        """Compiles of models a worker lacks go through `queue` (the compile queue's fair,
        capped turns: one tenant cycling many models waits behind its own compiles only)."""
        self._load_queue = queue

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        _fork_server_started()
        for _ in range(self.settings.workers):
            self._idle.put(self._spawn())

    def stop(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers), set()
            self._started = False
        for worker in workers:
            worker.stop()
        self._idle.take_idle()

    def pids(self) -> list[int]:
        """The live workers' process ids (operators and tests: which processes to watch)."""
        with self._lock:
            return sorted(w.pid for w in self._workers if w.pid is not None)

    def busy_pids(self) -> list[int]:
        """Workers handed to a request right now (tests: the one to kill mid-request)."""
        idle = self._idle.idle_ids()
        with self._lock:
            return sorted(w.pid for w in self._workers if id(w) not in idle and w.pid)

    def session_stats(self) -> list[WorkerStats]:
        """Each idle worker's sessions (the operator console); busy workers are skipped rather
        than waited for. Takes the idle workers for the few milliseconds the answers take."""
        taken = self._idle.take_idle()
        found: list[WorkerStats] = []
        for worker in taken:
            try:
                reply = self._check(worker.call(("stats", next(self._seq)), 10.0))
            except _Died as died:
                self._replace(worker, died, None)
                continue
            except TimeoutError:
                self._replace(worker, _Died(None), None)
                continue
            except BaseException:
                self._idle.put(worker)
                raise
            self._idle.put(worker)
            _keys, total, rss, sessions = reply[2]
            found.append(WorkerStats(worker.pid or 0, total, rss, sessions))
        return found

    def cached_keys(self) -> list[str]:
        """The content keys a worker (the next idle one) holds compiled, oldest use first."""
        keys: list[str] = self._call(("stats", next(self._seq)), 10.0, label=None)[2][0]
        return keys

    # -- use cases ---------------------------------------------------------------------------

    def compile(
        self,
        program: Blob,
        params: Blob | None,
        policy: Policy,
        options: SessionOptions,
        source: Callable[[], tuple[bytes, bytes | None]],
        digests: Digests | None = None,
        signature: SignatureCheck | None = None,
        owner: str = "",
        dims: DeclaredDims = (),
        onnx_to: Path | None = None,
    ) -> RemoteModel:
        """Validates, lowers, gates and builds the session in a worker (which keeps it).
        Raises what check_servable raises, WorkerCrashed, or CompileTimeout. A spooled
        program and params go to the worker as their file names (it reads and maps them), not
        as pickled bytes. `source`: where another worker reads the program and params again
        (storage); `digests`: their hashes when the caller has them (else computed here);
        `signature`: verified first, in the worker and within the compile's time (a
        SignatureRefused when it does not pass); `owner`: the tenant compiling it (whose share
        of the worker's cache it counts in); `dims`: the upload's declared dims, validated at;
        `onnx_to`: a new file the worker writes the lowered ONNX to (upload stores it from
        there)."""
        key = content_key(digests or Digests.of(program, params), policy, dims)
        message = (
            "compile", next(self._seq), key, program, params, policy, options, signature, owner,
            dims, onnx_to,
        )  # fmt: skip
        reply = self._call(message, self.settings.compile_timeout_s, label=None, holds=key)
        report, provenance = reply[2]
        return RemoteModel(Signature(report), key, source, policy, options, self, provenance, dims)

    def run(
        self,
        model: RemoteModel,
        feeds: Mapping[str, np.ndarray],
        *,
        deadline: float | None = None,
        cancelled: Cancel | None = None,
        label: ModelLabel | None = None,
        ran: Ran | None = None,
    ) -> dict[str, np.ndarray]:
        """The outputs of one run, copied out of the worker's arena."""
        worker, reply = self._reply(model, feeds, deadline, cancelled, None, (), label, ran)
        with self._released_on_failure(worker, label):
            _, _, (out_layout, out_inline), arena_size, retire = reply
            worker.arena.ensure(arena_size)
            outputs = worker.arena.read(out_layout, out_inline, copy=True)
            worker.arena.forget()
        self._give_back(worker, retire)
        return outputs

    def answer(
        self,
        model: RemoteModel,
        feeds: Mapping[str, np.ndarray],
        answers: Sequence[AnswerSpec],
        rows: Sequence[int],
        *,
        deadline: float | None = None,
        cancelled: Cancel | None = None,
        label: ModelLabel | None = None,
        ran: Ran | None = None,
    ) -> list[Answer | Exception]:
        """One run whose answers the worker encodes (server/dispatch/answer.py), one per batch
        member (`rows` each): an Answer, or the member's own error (its answer over budget).
        Answers of at most COPY_MAX_BYTES together are copied into memory; bigger ones into
        files of their own (arena.Spill), read from there as they are sent. Either way the
        worker is free once this returns."""
        worker, reply = self._reply(
            model, feeds, deadline, cancelled, tuple(answers), rows, label, ran
        )
        with self._released_on_failure(worker, label):
            _, _, encoded, arena_size, retire = reply
            worker.arena.ensure(arena_size)
            found = [e if isinstance(e, Exception) else Encoded(*e) for e in encoded]
            done = _taken_all(worker.arena, found)
        self._give_back(worker, retire)
        return done

    # -- helpers -----------------------------------------------------------------------------

    def _reply(
        self,
        model: RemoteModel,
        feeds: Mapping[str, np.ndarray],
        deadline: float | None,
        cancelled: Cancel | None,
        answers: tuple[AnswerSpec, ...] | None,
        rows: Sequence[int],
        label: ModelLabel | None,
        ran: Ran | None,
    ) -> tuple[_Worker, tuple[Any, ...]]:
        """A run's reply and the worker that gave it (held: the caller reads its arena). A
        worker lacking the model is given back, and the model is compiled into the next free
        one in the tenant's turn of the compile queue.
        NOTE: no worker is held while the load waits for its turn: the compiles ahead of it
        need workers, and a request holding one while waiting for them would never run."""
        run = (model, feeds, deadline, cancelled, answers, rows, label, ran)
        if (found := self._held_reply(run)) is not None:
            return found
        # One load of a model at a time: the requests that found it missing meanwhile wait
        # for that load and try again, rather than each taking a compile place (8 requests to
        # a model new to a worker were refused 429 by the tenant's compile cap).
        with self._loads.held(model.key):
            if (found := self._held_reply(run)) is not None:
                return found
            owner = "" if label is None else label[0]
            worker = self._load_queue(
                owner, lambda: self._loaded(model, owner, deadline, cancelled, label)
            )
        with self._released_on_failure(worker, label):
            # The held worker keeps what it just loaded (its newest session is never evicted).
            return worker, self._run_on(worker, *run)

    def _held_reply(self, run: _Run) -> tuple[_Worker, tuple[Any, ...]] | None:
        """The reply of `run` on the next free worker, that worker held; None, the worker
        given back, when it lacks the model."""
        model, _feeds, deadline, cancelled, _answers, _rows, label, _ran = run
        worker = self._worker_for(model.key, deadline, cancelled, label)
        with self._released_on_failure(worker, label):
            reply = self._run_on(worker, *run)
        if reply[0] == "missing":
            worker.holds.discard(model.key)
            self._idle.put(worker)
            return None
        worker.holds.add(model.key)
        return worker, reply

    def _loaded(
        self,
        model: RemoteModel,
        owner: str,
        deadline: float | None,
        cancelled: Cancel | None,
        label: ModelLabel | None,
    ) -> _Worker:
        """The next free worker, `model` compiled into it (if it lacks it), held."""
        worker = self._acquire(deadline, cancelled)
        with self._released_on_failure(worker, label):
            program, params = model.source()
            load = (
                "load", next(self._seq), model.key, program, params, model.policy,
                model.options, None, owner, model.dims,
            )  # fmt: skip
            self._check(worker.call(load, self.settings.compile_timeout_s))
        worker.holds.add(model.key)
        return worker

    def _worker_for(
        self, key: str, deadline: float | None, cancelled: Cancel | None, label: ModelLabel | None
    ) -> _Worker:
        if label is not None and self.quarantine.holds(label):
            raise ModelQuarantined(
                f"model {label[1]!r} version {label[2]} crashed its workers "
                f"{self.settings.quarantine_crashes} times and is quarantined until an admin "
                "releases it"
            )
        return self._acquire(deadline, cancelled, key)

    def _released_on_failure(self, worker: _Worker, label: ModelLabel | None) -> _OnFailure:
        """A run's failure: a dead worker replaced (its crash charged to `label`), a stuck one
        replaced, any other error's worker back to the idle ones."""
        return _OnFailure(self, worker, label)

    def _give_back(self, worker: _Worker, retire: bool) -> None:
        if retire:  # near its memory cap: a fresh worker from the next request on
            self._replace(worker, _Died(None), None)
        else:
            self._idle.put(worker)

    def _run_on(
        self,
        worker: _Worker,
        model: RemoteModel,
        feeds: Mapping[str, np.ndarray],
        deadline: float | None,
        cancelled: Cancel | None,
        answers: tuple[AnswerSpec, ...] | None,
        rows: Sequence[int],
        label: ModelLabel | None,
        ran: Ran | None = None,
    ) -> tuple[Any, ...]:
        arena = worker.arena
        layout, inline, _ = arena.write(feeds)
        timeout = None if deadline is None else deadline - time.monotonic() + _HARD_STOP_GRACE_S
        seq = next(self._seq)
        owner = "" if label is None else label[0]  # the tenant: its share of the worker's cache
        if cancelled is not None:
            cancelled.on_cancel(lambda: worker.cancel(seq))
        try:
            wire = None if answers is None else tuple(a.wire() for a in answers)
            message = (
                "run", seq, model.key, layout, inline, arena.size, deadline, wire, tuple(rows),
                owner,
            )  # fmt: skip
            started = time.monotonic()
            reply = worker.call(message, timeout)
            if ran is not None and reply[0] == "ok":
                ran(time.monotonic() - started)
        finally:
            if cancelled is not None:
                cancelled.on_cancel(None)
            arena.forget()  # the feeds written here: not kept in the server's memory
        return self._check(reply)

    @staticmethod
    def _check(reply: tuple[Any, ...]) -> tuple[Any, ...]:
        if reply[0] == "err":
            error: Exception = reply[2]
            raise error
        return reply

    def _call(
        self,
        message: tuple[Any, ...],
        timeout: float,
        label: ModelLabel | None,
        holds: str | None = None,
    ) -> Any:
        """`message`'s checked reply from the next free worker; `holds`: the content key the
        worker holds compiled once the reply is "ok" (a compile's)."""
        worker = self._acquire(None, None)
        try:
            reply = worker.call(message, timeout)
        except _Died as died:
            raise self._replace(worker, died, label) from None
        except TimeoutError:
            self._replace(worker, _Died(None), None)
            raise CompileTimeout(
                f"expected the program to compile within {timeout:g} s; it took longer"
            ) from None
        except BaseException:
            self._idle.put(worker)
            raise
        if holds is not None and reply[0] == "ok":
            worker.holds.add(holds)
        self._idle.put(worker)
        return self._check(reply)

    def _acquire(
        self, deadline: float | None, cancelled: Cancel | None, key: str | None = None
    ) -> _Worker:
        if not self._started:
            self.start()

        def give_up() -> None:
            if cancelled is not None and cancelled.is_set():
                raise RunCancelled("the client went away while the request was queued")
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceeded("the request waited for a worker past its deadline")

        return self._idle.get(give_up, key)

    def _replace(self, worker: _Worker, died: _Died, label: ModelLabel | None) -> Exception:
        """Stops a dead or stuck worker, starts another; the error for its request."""
        worker.stop()
        with self._lock:
            self._workers.discard(worker)
            running = self._started
        if running:
            self._idle.put(self._spawn())
        if died.exitcode == EXIT_OOM:
            log.warning("worker %s ran out of memory; replaced", worker.pid)
            return WorkerOutOfMemory(
                "the request took its worker over the memory cap; the worker was replaced"
            )
        log.error("worker %s died (exit status %s); replaced", worker.pid, died.exitcode)
        if label is not None and self.quarantine.crashed(label):
            log.error("model %r version %d quarantined after repeated crashes", *label[1:])
        return WorkerCrashed("the worker running this request died; it was replaced, retry")

    def _spawn(self) -> _Worker:
        s = self.settings
        arena, path = Arena.create(s.arena_bytes)
        config = WorkerConfig(
            path, s.arena_bytes, s.memory_cap_bytes, s.session_cache_bytes, s.compile_nice
        )
        ours, theirs = self._context.Pipe(duplex=True)
        cancel_reader, cancel_writer = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=main, args=(theirs, cancel_reader, config), name="graphgate-worker", daemon=True
        )
        process.start()
        theirs.close()  # only the worker holds its end: its death is EOF here
        cancel_reader.close()
        worker = _Worker(process, ours, cancel_writer, arena, path)
        with self._lock:
            self._workers.add(worker)
        return worker
