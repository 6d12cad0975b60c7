"""The worker process: compiles and runs models for the pool, one request at a time.

Messages are small tuples over a pipe, (kind, seq, ...); tensors stay in the arena. Compiled
models are kept by content key (sha256 of program, params and policy), so any worker can serve
any model: a run of a model this worker lacks answers "missing", and the pool sends "load".
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import resource
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar, cast

import numpy as np

from executor import CompiledModel, RunCancel, SessionOptions, build_servable, prepare_servable
from executor.errors import DeadlineExceeded, OutOfMemory, RunCancelled
from server.dispatch.answer import (
    AnswerSpec,
    EncodedWire,
    WireSpec,
    check_before_run,
    encode,
    member_rows,
    spec_of,
)
from server.dispatch.arena import Arena, Layout
from server.errors import ResponseOverBudget
from server.storage.spool import Spooled
from validator import Policy

if TYPE_CHECKING:
    from server.dispatch.signing import Provenance, SignatureCheck

T = TypeVar("T")

# Exit status of a worker that ran out of memory (its request already answered "oom").
EXIT_OOM: Final = 70
# An upload's declared dims (validator/dims.py), sorted (name, size) pairs: part of a model's key.
DeclaredDims = tuple[tuple[str, int], ...]
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")
_PROC_TASKS: Final = os.path.isdir("/proc/self/task")
# How long a session's threads may take to pin themselves after it is built (_pinned_cpus).
_PIN_WAIT_S: Final = 0.05


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    arena_path: Path
    arena_bytes: int
    memory_cap_bytes: int  # 0: no cap
    cache_bytes: int
    compile_nice: int = 0  # see `at_lower_priority`


def rss_bytes() -> int:
    # os-level calls: a third of the cost of open() (a text wrapper); a kept fd read again
    # with pread can return stale figures from /proc.
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        return int(os.read(fd, 128).split()[1]) * _PAGE
    finally:
        os.close(fd)


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class SessionCache:
    """Compiled models by content key, bounded in bytes: the ONNX size (its weights) plus the
    RSS growth measured around its first run (onnxruntime's arena). Growth around the compile
    is not counted: it is mostly the allocator keeping transient copies (protobuf, lowering),
    and varies 2x run to run.

    Shared fairly by the tenants whose requests the worker runs (every worker runs every
    tenant's): each entry's owner is the tenant that last used it, each owner holding entries
    has an equal share of the bytes, and a tenant over its share loses its own least recently
    used session first, so one tenant cycling many models evicts its own, never another's
    within its share (services/models.py shares the server's cache the same way, by count).
    The newest session always stays. Identical bytes under an identical policy are one
    session, whoever uploaded them (a session keeps nothing of a run)."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self._models: OrderedDict[str, tuple[CompiledModel, int]] = OrderedDict()
        self._owners: dict[str, str] = {}
        self._unmeasured_runs: set[str] = set()
        self.total = 0

    def get(self, key: str, owner: str = "") -> CompiledModel | None:
        hit = self._models.get(key)
        if hit is None:
            return None
        self._models.move_to_end(key)
        self._owners[key] = owner
        return hit[0]

    def put(self, key: str, model: CompiledModel, owner: str = "") -> None:
        self._drop(key)
        cost = len(model.onnx_bytes)
        self._models[key] = (model, cost)
        self._owners[key] = owner
        self._unmeasured_runs.add(key)
        self.total += cost
        self._evict(owner)

    def measures_first_run(self, key: str) -> bool:
        return key in self._unmeasured_runs

    def first_run_grew(self, key: str, grown: int) -> None:
        """Adds onnxruntime's arena growth of a model's first run to its cost."""
        if key not in self._unmeasured_runs or key not in self._models:
            return
        self._unmeasured_runs.discard(key)
        model, cost = self._models[key]
        self._models[key] = (model, cost + max(0, grown))
        self.total += max(0, grown)
        self._evict(self._owners[key])

    def keys(self) -> list[str]:
        return list(self._models)

    def sessions(self) -> dict[str, tuple[int, str]]:
        """Content key -> (bytes it costs, the provider its session runs on)."""
        return {key: (cost, model.provider) for key, (model, cost) in self._models.items()}

    def owners(self) -> dict[str, str]:
        """Content key -> the tenant that last used it."""
        return dict(self._owners)

    def _drop(self, key: str) -> None:
        if (old := self._models.pop(key, None)) is not None:
            self.total -= old[1]
            del self._owners[key]

    def _evict(self, adding: str) -> None:
        while self.total > self.cap_bytes and len(self._models) > 1:
            key = self._evictee(adding)
            self._drop(key)
            self._unmeasured_runs.discard(key)

    def _evictee(self, adding: str) -> str:
        """Which session leaves as `adding`'s pushes the cache past its cap: the least recently
        used of `adding`'s own when it holds more than its share, else of the tenant holding
        the most bytes; never the newest."""
        newest = next(reversed(self._models))
        held: dict[str, int] = {}
        for key, (_model, cost) in self._models.items():
            held[self._owners[key]] = held.get(self._owners[key], 0) + cost
        share = self.cap_bytes // len(held)
        loser = adding if held.get(adding, 0) > share else max(held, key=held.__getitem__)
        older = [key for key in self._models if key != newest]
        return next((key for key in older if self._owners[key] == loser), older[0])


class _Cancels:
    """The server's cancels, read from their own pipe by a thread of their own: a cancel
    reaches the run at once, and nothing polls for one while none comes."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._last = -1  # a cancel may arrive before its run starts: kept for it
        self._running: tuple[int, RunCancel] | None = None

    def listen(self) -> None:
        threading.Thread(target=self._listen, name="graphgate-cancels", daemon=True).start()

    def start(self, seq: int) -> RunCancel:
        cancel = RunCancel()
        with self._lock:
            self._running = (seq, cancel)
            early = self._last == seq
        if early:
            cancel.set()
        return cancel

    def finish(self) -> None:
        with self._lock:
            self._running = None

    def _listen(self) -> None:
        while True:
            try:
                seq = self._conn.recv()
            except (EOFError, OSError):
                return  # the server is gone
            with self._lock:
                self._last = seq
                running = self._running
            if running is not None and running[0] == seq:
                running[1].set()


class Worker:
    def __init__(self, conn: Connection, cancels: Connection, config: WorkerConfig) -> None:
        self.conn = conn
        self.config = config
        self.arena = Arena.attach(config.arena_path, config.arena_bytes)
        self.cache = SessionCache(config.cache_bytes)
        self.cancels = _Cancels(cancels)
        self.cpus = _this_thread_cpus()  # the process's CPUs, before any pinning
        self.session_cpus: set[int] = set()  # those onnxruntime pinned its threads to

    def serve(self) -> None:
        self.cancels.listen()
        self.conn.send(("ready", 0, os.getpid()))
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return  # the server is gone
            self.conn.send(self.answer(message))

    def answer(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        kind, seq = message[0], message[1]
        try:
            if kind == "run":
                return self.run(seq, *message[2:])
            if kind == "compile":
                return ("ok", seq, self.compile(*message[2:], nice=self.config.compile_nice))
            if kind == "load":  # for a request waiting to run: at the priority of runs
                key, owner = message[2], message[8]
                if self.cache.get(key, owner) is None:  # else another request loaded it here
                    self.compile(*message[2:])
                return ("ok", seq, None)
            if kind == "stats":
                stats = (self.cache.keys(), self.cache.total, rss_bytes(), self.cache.sessions())
                return ("ok", seq, stats)
            return ("err", seq, RuntimeError(f"unknown message {kind!r}"))
        except (OutOfMemory, MemoryError):
            self._out_of_memory(seq)
        except OSError as e:  # mmap or ftruncate of the arena past the cap
            if e.errno != errno.ENOMEM:
                return ("err", seq, _portable(e))
            self._out_of_memory(seq)
        except Exception as e:
            return ("err", seq, _portable(e))

    def _out_of_memory(self, seq: int) -> NoReturn:
        self.conn.send(("oom", seq))
        os._exit(EXIT_OOM)  # its heap may be torn: a fresh worker takes over

    def compile(
        self,
        key: str,
        program_blob: bytes | Spooled,
        params_blob: bytes | Spooled | None,
        policy: Policy,
        options: SessionOptions,
        signature: SignatureCheck | None = None,
        owner: str = "",
        dims: DeclaredDims = (),
        onnx_to: Path | None = None,
        *,
        nice: int = 0,
    ) -> tuple[Any, Provenance | None]:
        program = program_blob.read() if isinstance(program_blob, Spooled) else program_blob
        params = _mapped(params_blob) if isinstance(params_blob, Spooled) else params_blob
        # A signed upload is verified first: bytes its tenant's trust refuses are never parsed.
        # (The mapped params as bytes: signing only hashes and writes them, which takes any
        # buffer.)
        provenance = None if signature is None else signature.verify(program, cast(bytes, params))
        # Compiling, and the session's threads, may use every CPU: unpinned until built.
        _pin_this_thread(self.cpus)
        try:
            prepared = at_lower_priority(
                lambda: prepare_servable(program, params, policy, dict(dims)), nice
            )
            before = _thread_ids()
            model = build_servable(prepared, options)
            pins = options.intra_op_threads == 0  # onnxruntime's default count pins
            self.session_cpus |= _pinned_cpus(_thread_ids() - before, self.cpus, pins)
        finally:
            _pin_this_thread(_left_to_the_caller(self.cpus, self.session_cpus))
        self.cache.put(key, model, owner)
        if onnx_to is not None:
            _write_new(onnx_to, model.onnx_bytes)
        return model.program.report, provenance

    def run(
        self,
        seq: int,
        key: str,
        layout: Layout,
        inline: dict[str, Any],
        arena_bytes: int,
        deadline: float | None,
        wire_answers: tuple[WireSpec, ...] | None = None,
        rows: tuple[int, ...] = (),
        owner: str = "",
    ) -> tuple[Any, ...]:
        """Runs a request (or a batch: `rows` per member). With `answers`, each member's answer
        is encoded here, into the arena after the feeds (answer.py); else the outputs go there.
        `owner`: the tenant the request is for (whose share of the cache the session counts in)."""
        model = self.cache.get(key, owner)
        if model is None:
            return ("missing", seq)
        answers = None if wire_answers is None else tuple(map(spec_of, wire_answers))
        self.arena.ensure(arena_bytes)
        feeds = self.arena.read(layout, inline, copy=False)
        measured = self.cache.measures_first_run(key)
        before = rss_bytes() if measured else 0
        end = max([0, *(o + _nbytes(dtype, shape) for _, dtype, shape, o in layout if o >= 0)])
        cancel = self.cancels.start(seq)
        try:
            check = None if answers is None else partial(check_before_run, answers, rows)
            outputs = model.run(feeds, deadline=deadline, cancel=cancel, before_run=check)
            if measured:
                self.cache.first_run_grew(key, rss_bytes() - before)
            if answers is None:
                result: Any = self.arena.write(outputs, end)[:2]
            else:
                result = self._encode(answers, rows, outputs, end, _stop(deadline, cancel))
        finally:
            self.cancels.finish()
        cap = self.config.memory_cap_bytes
        # Near its cap: replaced after this. The peak (a cheap getrusage) bounds the current
        # size; /proc is read only once the peak has come near.
        retire = bool(cap) and _peak_rss_bytes() > cap * 0.9 and rss_bytes() > cap * 0.9
        return ("ok", seq, result, self.arena.size, retire)

    def _encode(
        self,
        answers: tuple[AnswerSpec, ...],
        rows: tuple[int, ...],
        outputs: dict[str, np.ndarray],
        start: int,
        stop: Callable[[], None],
    ) -> tuple[EncodedWire | Exception, ...]:
        """Each member's answer, one after the other in the arena from `start` (as
        Encoded.wire() tuples); a member over its budget gets its error, the others their
        answers."""
        parts = [outputs] if len(answers) == 1 else _split_rows(outputs, rows)
        sink = _ArenaSink(self.arena, start)
        done: list[EncodedWire | Exception] = []
        for spec, values in zip(answers, parts, strict=True):
            offset = sink.end = -(-sink.end // 64) * 64
            try:
                length, header = encode(spec, values, sink, stop)
            except ResponseOverBudget as over:
                done.append(over)
                continue
            done.append((offset, length, header))
        return tuple(done)


class _ArenaSink:
    """Appends to the arena from `end` (answer.encode's sink)."""

    def __init__(self, arena: Arena, start: int) -> None:
        self.arena = arena
        self.end = start

    def write(self, data: bytes | memoryview) -> None:
        self.end = self.arena.put(self.end, data)


def _stop(deadline: float | None, cancel: RunCancel) -> Callable[[], None]:
    """What encoding calls between pieces: the run's deadline and its cancel go on counting."""

    def check() -> None:
        if cancel.is_set():
            raise RunCancelled("the client went away while its answer was encoded")
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded("the request ran past its deadline while its answer was encoded")

    return check


def _split_rows(
    outputs: dict[str, np.ndarray], rows: tuple[int, ...]
) -> list[dict[str, np.ndarray]]:
    """Each batch member's rows of every output (batch-major: the validator's batching proof)."""
    parts = member_rows(outputs, rows)
    if parts is None:
        raise ValueError(f"expected batch-major outputs of {sum(rows)} rows to split")
    return parts


def _this_thread_cpus() -> set[int] | None:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


def _pin_this_thread(cpus: set[int] | None) -> None:
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)  # Linux: the calling thread only


def _thread_ids() -> set[int]:
    return {int(tid) for tid in os.listdir("/proc/self/task")} if _PROC_TASKS else set()


def _pinned_cpus(threads: set[int], cpus: set[int] | None, pins: bool) -> set[int]:
    """The CPUs `threads` (a session's, made as it was built) are pinned to: onnxruntime's
    default thread count (`pins`) pins one thread per core and leaves the first core to the
    caller.

    NOTE: each of onnxruntime's threads pins itself once it starts, which can be after the
    session is built: read at once, a thread may still have every CPU (seen when the session
    built fast, after the process's settling session had done onnxruntime's one-time set-up).
    So while a session that pins has threads not yet pinned, they are read again, for at most
    _PIN_WAIT_S."""
    deadline = time.monotonic() + _PIN_WAIT_S
    while True:
        pinned: set[int] = set()
        unpinned = 0
        for tid in threads:
            try:
                theirs = os.sched_getaffinity(tid)
            except OSError:  # exited meanwhile
                continue
            if cpus and theirs < cpus:
                pinned |= theirs
            else:
                unpinned += 1
        if not (pins and unpinned and cpus and len(cpus) > 1) or time.monotonic() > deadline:
            return pinned
        time.sleep(_PIN_WAIT_S / 50)


def _left_to_the_caller(cpus: set[int] | None, pinned: set[int]) -> set[int] | None:
    """Where the thread that calls the runs belongs: the CPUs onnxruntime left free of its
    own pinned threads (None, unpinned, when it pinned none).

    NOTE: unpinned, the worker's main thread was often woken (by the pool's message) on a core
    where a pinned onnxruntime thread runs, and the run's parallel loops waited on the two
    sharing it: ResNet50 at one caller, +3 points on average with the main thread pinned."""
    left = (cpus or set()) - pinned
    return left if pinned and left else None


def at_lower_priority(work: Callable[[], T], nice: int) -> T:
    """`work()` in a thread of its own whose OS priority is `nice` steps below the caller's;
    the caller's own priority is left as it was.

    NOTE: a thread, not this process: unprivileged code may raise its nice value but never
    lower it again, and Linux keeps nice per thread. Compiles (seconds of Python on a large
    program) then yield the CPUs to other workers' runs; the session is built back in the
    calling thread because onnxruntime's pool threads inherit their builder's priority."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return work()

    def lower_this_thread() -> None:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)

    # One fresh thread per call: its nice value ends with it.
    with ThreadPoolExecutor(1, "graphgate-compile", initializer=lower_this_thread) as lowered:
        return lowered.submit(work).result()  # work's exception, MemoryError included, as is


def _mapped(params: Spooled) -> memoryview:
    """The spooled params mapped read-only: the validator's views and the lowering read the
    page cache, no copy of the file is made in this process (nor pickled into it)."""
    if params.size == 0:
        return memoryview(b"")
    with params.path.open("rb") as f:
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _write_new(path: Path, data: bytes) -> None:
    """The lowered ONNX to a file the server named (it hashes and stores it from there)."""
    with path.open("xb") as f:
        f.write(data)


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return np.dtype(dtype).itemsize * math.prod(shape)


def _portable(error: Exception) -> Exception:
    """The error as the server can unpickle it: graphgate's own errors as they are (their
    classes are importable there), anything else as a RuntimeError with its text."""
    module = type(error).__module__.split(".")[0]
    if module in {"executor", "validator", "server", "graph_proto"}:
        return error
    return RuntimeError(f"{type(error).__name__}: {error}")


def main(conn: Connection, cancels: Connection, config: WorkerConfig) -> None:
    """The worker's entry point (multiprocessing target)."""
    if config.memory_cap_bytes:
        cap = config.memory_cap_bytes
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    Worker(conn, cancels, config).serve()
