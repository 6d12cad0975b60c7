"""CompiledModel: one onnxruntime session per model, shared by every request (Run is thread-safe)."""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from executor import gate
from executor.convert import lower
from executor.device import CUDA, session_device
from executor.errors import (
    DeadlineExceeded,
    IncompatibleInputs,
    OutOfMemory,
    RequestOverBudget,
    RunCancelled,
    SizeUnbounded,
    TensorTooLarge,
)
from executor.lower import IR_VERSION, ONNX_OPSET, LoweringError
from executor.runtime_checks import HostBounds, RuntimeChecks, check_dim_constraints, within
from executor.scope import DEFAULT_MAX_REQUEST_BYTES, Scope, check_outputs
from validator import Code, Scalar, TensorType, ValidatedProgram
from validator.budget import over_request_budget, request_cost
from validator.infer import tensor_bytes
from validator.runtime import RuntimeShapeError, reinfer

log = logging.getLogger("graphgate.executor")

_SHAPE_CACHE_SIZE: Final = 256
_ORT_ERRORS: Final = (
    ort.capi.onnxruntime_pybind11_state.Fail,
    ort.capi.onnxruntime_pybind11_state.InvalidGraph,
    ort.capi.onnxruntime_pybind11_state.NotImplemented,
    ort.capi.onnxruntime_pybind11_state.InvalidArgument,
)
_VALUE_LIMIT: Final = 64  # feeds this small may hold sizes (range bounds, scales)
_RUN_ERRORS: Final = (
    ort.capi.onnxruntime_pybind11_state.Fail,
    ort.capi.onnxruntime_pybind11_state.InvalidArgument,
    ort.capi.onnxruntime_pybind11_state.RuntimeException,
)
# How onnxruntime words a failed allocation (std::bad_alloc, its arena's own message).
_ALLOCATION_FAILED: Final = ("bad_alloc", "bad allocation", "Failed to allocate")


@dataclass(frozen=True, slots=True)
class SessionOptions:
    intra_op_threads: int = 0  # 0: onnxruntime's default (one per core)
    inter_op_threads: int = 1
    use_cuda: bool = True
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    cuda_device_id: int = 0
    cuda_mem_limit_bytes: int = 0  # 0: onnxruntime's default (no limit)
    cuda_arena_extend_strategy: str = "kSameAsRequested"
    cuda_graphs: bool = False  # only ever for fixed-shape models (see cuda_provider_options)
    # onnxruntime's intra-op threads spin after a run waiting for more work: right for one
    # session owning the cores, wrong for worker processes sharing them (an idle worker's
    # spinning threads took half of ResNet50's CPU from the busy one: served 77 ms vs 39 ms raw).
    allow_spinning: bool = True
    # With spinning: how long an idle thread spins before it sleeps, in microseconds (0:
    # onnxruntime's own default). A short spin keeps a run's threads awake between its ops
    # and gives the cores back soon after (benchmarks/results/workers.md).
    spin_us: int = 0


class SessionRefused(LoweringError):
    """onnxruntime cannot build a session for the lowered model (no kernel for a dtype on this
    provider): a refusal of what this server can run, not a lowering bug."""

    code = Code.LOWERING_UNSUPPORTED


def choose_providers(use_cuda: bool) -> list[str]:
    """CUDA then CPU when CUDA can start here (executor/device.py); CPU alone otherwise."""
    return session_device(use_cuda).providers


def cuda_provider_options(options: SessionOptions, fixed_shape: bool) -> dict[str, str]:
    """The CUDA provider's options: the device, the per-process memory cap and the arena's
    growth (a worker shares the GPU with others: its arena must not take it all), and CUDA
    graphs, which replay one captured launch sequence and so need every shape fixed."""
    provider: dict[str, str] = {
        "device_id": str(options.cuda_device_id),
        "arena_extend_strategy": options.cuda_arena_extend_strategy,
    }
    if options.cuda_mem_limit_bytes > 0:
        provider["gpu_mem_limit"] = str(options.cuda_mem_limit_bytes)
    if options.cuda_graphs and fixed_shape:
        provider["enable_cuda_graph"] = "1"
    return provider


def device_of(provider: str, options: SessionOptions) -> str:
    """Where a session's tensors live: `cuda:N` or `cpu` (metadata and /metrics)."""
    return f"cuda:{options.cuda_device_id}" if provider == CUDA else "cpu"


def _fixed_shape(program: ValidatedProgram) -> bool:
    return all(d >= 0 for spec in program.inputs for d in spec.dims)


@dataclass(frozen=True, slots=True)
class _Checked:
    """What a request's checks found before its run, the same for every request with the same
    feed names, dtypes and shapes (when no size depends on a feed's values)."""

    fed_shapes: dict[str, tuple[int, ...]]
    sizes: dict[str, tuple[Scalar, ...]]  # the small feeds' values some size depends on
    fetches: tuple[tuple[str, TensorType], ...]  # each fetch's re-inferred type, in order
    # The same as onnxruntime gives them, (numpy dtype, dims) in order: one comparison
    # checks every fetch of a run (CompiledModel.run, `_produced`)
    produced: list[tuple[np.dtype[np.generic], tuple[int, ...]]]
    fetch_shapes: dict[str, tuple[int, ...]]  # what `before_run` is given
    bounds: tuple[HostBounds, ...]  # the host checks' ranges at these shapes
    # A var the graph takes as non-empty is empty here, and so is every fetch: the answer is
    # the fetches' empty arrays, without a run (_empty_answer)
    empty: bool = False


@dataclass(eq=False)
class CompiledModel:
    """A validated program lowered to ONNX with its session; immutable after compile()."""

    program: ValidatedProgram
    onnx_bytes: bytes
    session: ort.InferenceSession
    provider: str
    output_names: tuple[str, ...]  # ONNX graph outputs: the fetches in col order, then hidden
    max_request_bytes: int
    checks: RuntimeChecks = field(default_factory=RuntimeChecks)
    device: str = "cpu"
    # IO binding: feeds copied to the device once, outputs back once (CUDA; settable for tests)
    bind_io: bool = False
    cuda_graph: bool = False  # captured: every run uses the same device buffers (one at a time)
    _bound: _BoundBuffers | None = None
    _shapes: OrderedDict[tuple[object, ...], dict[str, TensorType]] = field(
        default_factory=OrderedDict
    )
    # What the checks found for feeds of one set of names, dtypes and shapes (_request_key).
    _checked: dict[tuple[object, ...], _Checked] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _fetch_list: list[str] = field(init=False)  # every graph output, as runs ask for them
    _fetch_names: tuple[str, ...] = field(init=False)  # the program's fetches, in order
    _session_call: Callable[..., list[np.ndarray]] = field(init=False)

    def __post_init__(self) -> None:
        self._fetch_list = list(self.output_names)
        self._fetch_names = tuple(spec.name for spec in self.program.outputs)
        # NOTE: onnxruntime's Python `run` first checks the feeds' names against the graph's
        # inputs and their kinds (~4 us a run, ~3% of a small transformer's at batch 1); the
        # Scope has checked them already (names, dtypes, shapes), so runs call the binding
        # under it when this onnxruntime has one (`_sess`, private: else the public `run`).
        native = getattr(self.session, "_sess", None)
        self._session_call = getattr(native, "run", None) or self.session.run

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        deadline: float | None = None,
        cancel: RunCancel | None = None,
        before_run: Callable[[Mapping[str, tuple[int, ...]]], None] | None = None,
    ) -> dict[str, np.ndarray]:
        """Checks the feeds and the request's cost, runs, checks the fetches; returns them by
        Paddle var name. `deadline` (time.monotonic()) and `cancel` stop onnxruntime mid-run
        (DeadlineExceeded, RunCancelled). `before_run` is given the fetches' re-inferred shapes
        (-1: a dim the data decides) once the request's own checks pass, before anything runs:
        the caller's budgets of what it will do with them (the server's answer budget)."""
        key = self._request_key(feeds)
        known = None if key is None else self._checked.get(key)
        checked: Mapping[str, np.ndarray]
        if known is None:
            checked, known = self._check_request(feeds)
            if key is not None:
                self._remember(key, known)
        else:
            checked = feeds  # these names, dtypes and shapes passed every check before
        checks = self.checks
        if not within(checked, known.bounds):
            checks.before_run(checked, known.fed_shapes)  # raises, naming the check that fails
        if before_run is not None:
            before_run(known.fetch_shapes)
        if known.empty:
            return {name: np.empty(t.shape, t.dtype.numpy) for name, t in known.fetches}
        stop = None if deadline is None and cancel is None else _Stop(deadline, cancel)
        try:
            if stop is None:
                values = self._session_run(checked, _QUIET_RUN)
            else:
                with stop.watched():
                    values = self._session_run(checked, stop.options)
        except _RUN_ERRORS as e:
            if stop is not None:
                stop.raise_if_fired()
            if any(words in str(e) for words in _ALLOCATION_FAILED):
                raise OutOfMemory("onnxruntime could not allocate memory for this run") from None
            expected = self._expected_types(known.fed_shapes, known.sizes)
            shapes = {name: t.shape for name, t in expected.items()}
            raise checks.explain(str(e), checked, shapes) from None
        fetches = known.fetches
        # Hidden outputs (loop flags, select_input Masks) follow the fetches; most models have none.
        if checks.hidden_outputs and (taken := checks.after_run(values[len(fetches) :])):
            # Dims that depend on the branch that ran: now known exactly, checked exactly.
            expected = self._expected_types(known.fed_shapes, known.sizes, taken)
            fetches = tuple((spec.name, expected[spec.name]) for spec in self.program.outputs)
        elif _produced(values) == known.produced:
            # Every fetch has exactly its re-inferred dtype and dims (most runs): one comparison.
            return dict(zip(self._fetch_names, values, strict=False))
        outputs = {
            name: np.asarray(value) for (name, _), value in zip(fetches, values, strict=False)
        }
        check_outputs(outputs, dict(fetches))
        return outputs

    def _check_request(
        self, feeds: Mapping[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], _Checked]:
        """Every check of the feeds before a run: the recorded dim constraints, the signature
        (names, dtypes, ranks, fixed dims, the byte cap), the re-inferred shapes and the
        run-time budget. Returns the feeds as they run and what the checks found."""
        check_dim_constraints(self.program.report.dim_constraints, feeds)
        scope = Scope(self.program.inputs, self.max_request_bytes)
        checked = scope.feed_all(feeds)
        sizes = self._size_values(checked)
        fed_shapes = scope.shapes()
        self.checks.check_shapes(fed_shapes)
        expected = self._expected_types(fed_shapes, sizes)
        outputs = self.program.outputs
        found = _Checked(
            fed_shapes=fed_shapes,
            sizes=sizes,
            fetches=tuple((spec.name, expected[spec.name]) for spec in outputs),
            produced=[
                (expected[spec.name].dtype.numpy, expected[spec.name].shape) for spec in outputs
            ],
            fetch_shapes={spec.name: expected[spec.name].shape for spec in outputs},
            bounds=self.checks.host_bounds(fed_shapes),
            empty=self._empty_answer(expected),
        )
        return checked, found

    def _empty_answer(self, types: Mapping[str, TensorType]) -> bool:
        """Whether this request's answer is its fetches' empty arrays, found without a run: a
        var the lean graph takes as non-empty (checks.nonempty) is empty at these shapes, so
        the graph would give its dims another empty shape than Paddle's (a reshape's 0 copies
        a dim there, where Paddle's is a size of 0). Raises IncompatibleInputs when some
        fetch would hold values then: the graph cannot answer it as Paddle does."""
        empty = [n for n in self.checks.nonempty if any(d <= 0 for d in types[n].shape)]
        if not empty:
            return False
        full = [  # a fetch that may hold values (-1: a dim this inference leaves open)
            f"{spec.name} {list(types[spec.name].shape)}"
            for spec in self.program.outputs
            if 0 not in types[spec.name].shape or -1 in types[spec.name].shape
        ]
        if full:
            raise IncompatibleInputs(
                f"these inputs make {empty[0]!r} empty ({list(types[empty[0]].shape)}) while "
                f"outputs hold values ({', '.join(full)}); graphgate runs this program's "
                "reshapes with that tensor non-empty: expected inputs that leave it at least one "
                "element, or that leave every output empty"
            )
        return True

    def _request_key(self, feeds: Mapping[str, np.ndarray]) -> tuple[object, ...] | None:
        """What every check before a run reads of these feeds (names, dtypes, shapes), when
        that is all they read: not for programs whose sizes depend on feed values. None: the
        feeds are checked in full (a value not a contiguous array, or such a program)."""
        if self.program.report.data_dependent:
            return None
        key: list[object] = []
        for name, value in feeds.items():
            if type(value) is not np.ndarray or not value.flags.c_contiguous:
                return None
            key += (name, value.dtype, value.shape)
        return tuple(key)

    def _remember(self, key: tuple[object, ...], found: _Checked) -> None:
        with self._lock:
            self._checked[key] = found
            if len(self._checked) > _SHAPE_CACHE_SIZE:
                # The oldest goes: a model's requests repeat few shapes, and the next request
                # of an evicted one is only checked in full again.
                del self._checked[next(iter(self._checked))]

    def _session_run(
        self, feeds: Mapping[str, np.ndarray], options: ort.RunOptions
    ) -> list[np.ndarray]:
        if not self.bind_io:
            return self._session_call(self._fetch_list, feeds, options)
        if self.cuda_graph:
            with self._lock:  # the graph replays on fixed buffers: one run at a time
                return self._run_graph(feeds, options)
        return self._run_bound(feeds, options)

    def _run_bound(
        self, feeds: Mapping[str, np.ndarray], options: ort.RunOptions
    ) -> list[np.ndarray]:
        """Each feed copied host->device once by onnxruntime, each output produced on the
        device and copied back once (without binding, CPU fallbacks may copy more)."""
        kind, device_id = _device_parts(self.device)
        binding = self.session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name in self.output_names:
            binding.bind_output(name, kind, device_id)
        self.session.run_with_iobinding(binding, options)
        return list(binding.copy_outputs_to_cpu())

    def _run_graph(
        self, feeds: Mapping[str, np.ndarray], options: ort.RunOptions
    ) -> list[np.ndarray]:
        """CUDA graphs: the device buffers are made at the first run and refilled in place."""
        if self._bound is None:
            self._bound = _BoundBuffers.make(self.session, feeds, self.output_names, self.device)
        self._bound.fill(feeds)
        self.session.run_with_iobinding(self._bound.binding, options)
        values = [value.numpy() for value in self._bound.outputs]
        # On the host numpy() may alias the bound buffer, which the next run overwrites.
        return values if self.device.startswith("cuda") else [v.copy() for v in values]

    def _size_values(self, feeds: Mapping[str, np.ndarray]) -> dict[str, tuple[Scalar, ...]]:
        """Values of small feeds (ints, or floats such as scales), when some size depends on them."""
        if not self.program.report.data_dependent:
            return {}
        return {
            spec.name: tuple(feeds[spec.name].reshape(-1).tolist())
            for spec in self.program.inputs
            if feeds[spec.name].size <= _VALUE_LIMIT
        }

    def _expected_types(
        self,
        shapes: Mapping[str, tuple[int, ...]],
        values: Mapping[str, tuple[Scalar, ...]],
        taken: Mapping[int, int] | None = None,
    ) -> dict[str, TensorType]:
        key = (
            tuple(shapes[spec.name] for spec in self.program.inputs),
            tuple(sorted(values.items())),
            tuple(sorted((taken or {}).items())),
        )
        with self._lock:
            cached = self._shapes.get(key)
            if cached is not None:
                self._shapes.move_to_end(key)
                return cached
        try:
            types = reinfer(self.program, shapes, values, taken)
        except RuntimeShapeError as e:
            raise IncompatibleInputs(f"the inputs do not fit the program: {e}") from None
        self._check_data_dependent(types)
        if taken is None:
            self._check_budget(shapes, values, types)
        with self._lock:
            self._shapes[key] = types
            if len(self._shapes) > _SHAPE_CACHE_SIZE:
                self._shapes.popitem(last=False)
        return types

    def _check_budget(
        self,
        shapes: Mapping[str, tuple[int, ...]],
        values: Mapping[str, tuple[Scalar, ...]],
        types: Mapping[str, TensorType],
    ) -> None:
        """The run-time budget (threats.md: dynamic dims): the validator's cost model at these
        concrete shapes, against the tenant's policy, before anything runs."""
        program = self.program
        feeds = {
            spec.name: TensorType(spec.dtype, tuple(shapes[spec.name]), values.get(spec.name))
            for spec in program.inputs
        }
        params = {name: program.types[name] for name in program.params}
        fetches = [spec.name for spec in program.outputs]
        batch = max([1, *(shapes[s.name][0] for s in program.inputs if s.dims and s.dims[0] < 0)])
        out_bytes = sum(tensor_bytes(types[name]) for name in fetches if types[name].known)
        cost = request_cost(program.ops, feeds, params, fetches, batch, program.policy, out_bytes)
        problem = cost if isinstance(cost, str) else over_request_budget(cost, program.policy)
        if problem is not None:
            raise RequestOverBudget(problem)

    def _check_data_dependent(self, types: Mapping[str, TensorType]) -> None:
        """Tensors sized by input data are bounded before anything runs (threats.md 3.3)."""
        cap = self.program.policy.max_tensor_bytes
        for name in self.program.report.data_dependent:
            t = types[name]
            if not t.known:
                raise SizeUnbounded(
                    f"tensor {name!r} is sized by input data graphgate cannot read before "
                    f"running (dims {list(t.shape)}); expected sizes computed from small "
                    "integer inputs"
                )
            if tensor_bytes(t) > cap:
                raise TensorTooLarge(
                    f"tensor {name!r} {t.dtype.label}{list(t.shape)}: expected at most {cap} "
                    f"bytes, got {tensor_bytes(t)} for these inputs"
                )


def _produced(
    values: list[np.ndarray],
) -> list[tuple[np.dtype[np.generic], tuple[int, ...]]] | None:
    """The outputs' (dtype, dims) (no hidden ones: a model without them); None when one is
    not an array (a value of another kind is then checked, and refused, one by one)."""
    try:
        return [(value.dtype, value.shape) for value in values]
    except AttributeError:
        return None


def _device_parts(device: str) -> tuple[str, int]:
    kind, _, index = device.partition(":")
    return kind, int(index or 0)


@dataclass(eq=False)
class _BoundBuffers:
    """Device-resident inputs and outputs at fixed addresses (what a CUDA graph replays on)."""

    binding: ort.IOBinding
    inputs: dict[str, ort.OrtValue]
    outputs: list[ort.OrtValue]

    @classmethod
    def make(
        cls,
        session: ort.InferenceSession,
        feeds: Mapping[str, np.ndarray],
        output_names: tuple[str, ...],
        device: str,
    ) -> _BoundBuffers:
        kind, device_id = _device_parts(device)
        binding = session.io_binding()
        inputs = {
            name: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v), kind, device_id)
            for name, v in feeds.items()
        }
        for name, value in inputs.items():
            binding.bind_ortvalue_input(name, value)
        for name in output_names:
            binding.bind_output(name, kind, device_id)
        session.run_with_iobinding(binding, _QUIET_RUN)  # allocates the outputs, once
        outputs = list(binding.get_outputs())
        for name, value in zip(output_names, outputs, strict=True):
            binding.bind_ortvalue_output(name, value)
        return cls(binding, inputs, outputs)

    def fill(self, feeds: Mapping[str, np.ndarray]) -> None:
        for name, value in feeds.items():
            self.inputs[name].update_inplace(np.ascontiguousarray(value))


def _quiet_run() -> ort.RunOptions:
    """A failed run is the caller's error, reported typed: onnxruntime must not log it to stderr."""
    options = ort.RunOptions()
    options.log_severity_level = 4
    options.logid = "graphgate"
    return options


# Made once: Run only reads its options, so every request and thread shares these.
_QUIET_RUN: Final = _quiet_run()


class RunCancel:
    """Set from any thread when a run is no longer wanted (its client went away): the callback
    registered with `on_cancel` fires at once, or when registered if the cancel came first.
    A run given one is stopped by it: onnxruntime is told to stop (it checks between nodes,
    loop bodies included); set before the run starts, the run never starts. The server passes
    the same object on to its workers (server/dispatch/pool.py).

    NOTE: signalled, not polled: a flag polled every few milliseconds woke a thread in every
    busy worker ~200 times a second, and each wake-up took a core from the run's own threads
    (ResNet50 at one caller: ~1% of its throughput)."""

    __slots__ = ("__weakref__", "_callback", "_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._callback: Callable[[], None] | None = None

    def set(self) -> None:
        with self._lock:
            self._set = True
            callback = self._callback
        if callback is not None:
            callback()

    def is_set(self) -> bool:
        return self._set

    def on_cancel(self, callback: Callable[[], None] | None) -> None:
        """Registers what a cancel does (None: nothing, e.g. once answered)."""
        with self._lock:
            self._callback = callback
            fire = self._set and callback is not None
        if fire and callback is not None:
            callback()


class _Stop:
    """A run's deadline and cancellation: either sets `terminate` on the run's own RunOptions
    (the watchdog at the deadline, the canceller's thread at once); none: the shared options."""

    __slots__ = ("cancel", "deadline", "fired", "options")

    def __init__(self, deadline: float | None, cancel: RunCancel | None) -> None:
        self.deadline = deadline
        self.cancel = cancel
        self.fired: type[Exception] | None = None
        self.options = _QUIET_RUN if deadline is None and cancel is None else _quiet_run()
        if deadline is not None and time.monotonic() >= deadline:
            self.fired = DeadlineExceeded
            self.raise_if_fired()

    def watched(self) -> _Watched:
        return _Watched(self)

    def fire(self, kind: type[Exception]) -> None:
        if self.fired is None:
            self.fired = kind
            self.options.terminate = True

    def cancelled(self) -> None:
        self.fire(RunCancelled)

    def due(self, now: float) -> bool:
        """Fires at the deadline; True once fired (by either)."""
        if self.deadline is not None and now >= self.deadline:
            self.fire(DeadlineExceeded)
        return self.fired is not None

    def raise_if_fired(self) -> None:
        if self.fired is DeadlineExceeded:
            raise DeadlineExceeded("the request ran past its deadline and was stopped")
        if self.fired is RunCancelled:
            raise RunCancelled("the client went away; the run was stopped")


class _Watched:
    def __init__(self, stop: _Stop) -> None:
        self.stop = stop

    def __enter__(self) -> None:
        if self.stop.deadline is not None:
            _WATCHDOG.add(self.stop)
        if self.stop.cancel is not None:
            self.stop.cancel.on_cancel(self.stop.cancelled)

    def __exit__(self, *exc: object) -> None:
        if self.stop.cancel is not None:
            self.stop.cancel.on_cancel(None)  # and no cycle left from the cancel to the run
        if self.stop.deadline is not None:
            _WATCHDOG.remove(self.stop)


class _Watchdog:
    """One daemon thread for every run with a deadline: it sleeps until the nearest one.

    Waking it costs more than a tiny run (a GIL hand-off, ~0.1 ms), so `add` wakes it only
    when the new run's deadline comes before the time it would wake anyway."""

    def __init__(self) -> None:
        self._runs: set[_Stop] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._due = math.inf  # when the thread wakes next, at the latest

    def add(self, stop: _Stop) -> None:
        assert stop.deadline is not None
        with self._wake:
            self._runs.add(stop)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="ort-watchdog", daemon=True)
                self._thread.start()
            if stop.deadline < self._due:
                self._due = stop.deadline
                self._wake.notify()

    def remove(self, stop: _Stop) -> None:
        with self._wake:
            self._runs.discard(stop)

    def _loop(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                for stop in [s for s in self._runs if s.due(now)]:
                    self._runs.discard(stop)
                deadlines = [s.deadline for s in self._runs if s.deadline is not None]
                self._due = min(deadlines, default=math.inf)
                self._wake.wait(None if not deadlines else max(0.0, self._due - now))


_WATCHDOG: Final = _Watchdog()


def _session(
    model: bytes,
    options: ort.SessionOptions,
    providers: list[str],
    cuda_options: Mapping[str, str] | None = None,
) -> ort.InferenceSession:
    if providers[0] != CUDA:
        return ort.InferenceSession(model, options, providers=providers)
    with_options: list[str | tuple[str, dict[str, str]]] = [
        (CUDA, dict(cuda_options or {})),
        *providers[1:],
    ]
    # Without CUDA libraries onnxruntime logs a multi-line error at its default level while
    # falling back to CPU; quiet its process-wide logger for that moment and log once ourselves.
    ort.set_default_logger_severity(4)
    try:
        return ort.InferenceSession(model, options, providers=with_options)
    finally:
        ort.set_default_logger_severity(2)


@functools.cache
def _settle_onnxruntime() -> None:
    """Builds and drops a one-node session, once per process, before the first model's.

    NOTE: measured: the first session a process builds runs slower than every later session
    of the same graph, for as long as it lives (ERNIE at batch 8, three sessions of one graph
    in one process timed in turn: the first 3-4% slower than the other two, in four runs out
    of four; after a throwaway one-node session, the three within 1%). Whatever onnxruntime
    sets up on its first session (done once per process) is then done before a model's
    session, not during it: each worker's first model, and a benchmark's first engine, ran
    this much slower than they should. Costs ~11 ms once per process (1 ms for a later one)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "graphgate_settle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)], ir_version=IR_VERSION
    )
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@functools.cache
def _cuda_failed_once() -> None:
    # The driver, a GPU and the libraries answered (executor/device.py), yet onnxruntime fell
    # back: rare (a GPU out of memory, a library of the wrong version); said once per process.
    log.warning(
        "graphgate: the CUDA provider failed to start although the NVIDIA driver, a GPU and "
        "the CUDA libraries load; sessions that fail so run on CPU"
    )


@dataclass(frozen=True, slots=True)
class Prepared:
    """A program lowered and gated, its ONNX serialized: all of compiling but the session."""

    program: ValidatedProgram
    model_bytes: bytes
    output_names: tuple[str, ...]
    checks: RuntimeChecks


def compile(program: ValidatedProgram, options: SessionOptions = SessionOptions()) -> CompiledModel:
    """Lowers, gates and builds the session. Raises GateError or LoweringError (SessionRefused
    when onnxruntime cannot run the model; all GraphErrors)."""
    return build(prepare(program), options)


def prepare(program: ValidatedProgram) -> Prepared:
    """Lowers and gates (GateError, LoweringError): the part of compiling done in Python."""
    lowered = lower(program, lean=True)
    gate.check(lowered.model)
    if disagreements := gate.cross_check_shapes(lowered.model, lowered.values):
        # A bug in a rule or a lowering, never the uploader's fault: refuse to serve it.
        raise gate.GateError(
            f"ONNX shape inference disagrees with the validator on {len(disagreements)} values: "
            + "; ".join(disagreements[:5])
        )
    output_names = tuple(o.name for o in lowered.model.graph.output)
    return Prepared(program, lowered.model.SerializeToString(), output_names, lowered.checks)


def spinning_config(options: SessionOptions) -> dict[str, str]:
    """onnxruntime's session config entries for how its idle threads wait for work."""
    if not options.allow_spinning:
        return {f"session.{pool}.allow_spinning": "0" for pool in ("intra_op", "inter_op")}
    if options.spin_us:
        return {
            f"session.{pool}.spin_duration_us": str(options.spin_us)
            for pool in ("intra_op", "inter_op")
        }
    return {}


def ort_session_options(options: SessionOptions) -> ort.SessionOptions:
    """onnxruntime's options for a session built with `options` (also what the benchmarks give
    other ONNX files, so that they run under the same settings)."""
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = options.intra_op_threads
    session_options.inter_op_num_threads = options.inter_op_threads
    for key, value in spinning_config(options).items():
        session_options.add_session_config_entry(key, value)
    session_options.log_severity_level = 3  # a CUDA provider that fails to start: our line below
    return session_options


def build(prepared: Prepared, options: SessionOptions = SessionOptions()) -> CompiledModel:
    """The onnxruntime session of a prepared program (SessionRefused when it cannot run it).

    NOTE: onnxruntime makes the session's thread pool here, and its threads inherit the OS
    priority of the thread that calls this: build at the priority runs should have."""
    program, model_bytes = prepared.program, prepared.model_bytes
    session_options = ort_session_options(options)
    providers = choose_providers(options.use_cuda)
    graphs = options.cuda_graphs and _fixed_shape(program)
    cuda_options = cuda_provider_options(options, graphs)
    _settle_onnxruntime()
    try:
        session = _session(model_bytes, session_options, providers, cuda_options)
    except _ORT_ERRORS as e:
        # e.g. no kernel for a dtype (onnxruntime's CPU has no float64 Conv): refused, typed.
        raise SessionRefused(
            f"onnxruntime cannot build a session for this model: {str(e).splitlines()[0][:300]}"
        ) from None
    chosen = session.get_providers()[0]
    if providers[0] == CUDA and chosen != CUDA:
        _cuda_failed_once()
    return CompiledModel(
        program,
        model_bytes,
        session,
        chosen,
        prepared.output_names,
        options.max_request_bytes,
        prepared.checks,
        device=device_of(chosen, options),
        bind_io=chosen == CUDA,
        cuda_graph=chosen == CUDA and graphs,
    )
