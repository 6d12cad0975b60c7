"""CompiledModel: one onnxruntime session per model, shared by every request (Run is thread-safe)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import onnxruntime as ort

from executor import gate
from executor.convert import lower
from executor.errors import IncompatibleInputs, SizeUnbounded, TensorTooLarge
from executor.lower import LoweringError
from executor.runtime_checks import RuntimeChecks
from executor.scope import DEFAULT_MAX_REQUEST_BYTES, Scope, check_outputs
from validator import Code, Scalar, TensorType, ValidatedProgram
from validator.infer import tensor_bytes
from validator.runtime import RuntimeShapeError, reinfer

log = logging.getLogger("graphgate.executor")

CUDA: Final = "CUDAExecutionProvider"
CPU: Final = "CPUExecutionProvider"
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


@dataclass(frozen=True, slots=True)
class SessionOptions:
    intra_op_threads: int = 0  # 0: onnxruntime's default (one per core)
    inter_op_threads: int = 1
    use_cuda: bool = True
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES


class SessionRefused(LoweringError):
    """onnxruntime cannot build a session for the lowered model (no kernel for a dtype on this
    provider): a refusal of what this server can run, not a lowering bug."""

    code = Code.LOWERING_UNSUPPORTED


def choose_providers(use_cuda: bool) -> list[str]:
    """CUDA then CPU when this onnxruntime build has CUDA; CPU alone otherwise."""
    if use_cuda and CUDA in ort.get_available_providers():
        return [CUDA, CPU]
    return [CPU]


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
    _shapes: OrderedDict[tuple[object, ...], dict[str, TensorType]] = field(
        default_factory=OrderedDict
    )
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Checks the feeds, runs, checks the fetches; returns them by Paddle var name."""
        scope = Scope(self.program.inputs, self.max_request_bytes)
        checked = scope.feed_all(feeds)
        sizes = self._size_values(checked)
        fed_shapes = scope.shapes()
        expected = self._expected_types(fed_shapes, sizes)
        checks = self.checks
        checks.before_run(checked, fed_shapes)
        try:
            values = self.session.run(list(self.output_names), checked, _QUIET_RUN)
        except _RUN_ERRORS as e:
            shapes = {name: t.shape for name, t in expected.items()}
            raise checks.explain(str(e), checked, shapes) from None
        fetched = len(self.program.outputs)
        # Hidden outputs (loop flags, select_input Masks) follow the fetches; most models have none.
        if checks.hidden_outputs and (taken := checks.after_run(values[fetched:])):
            # Dims that depend on the branch that ran: now known exactly, checked exactly.
            expected = self._expected_types(fed_shapes, sizes, taken)
        outputs = {
            spec.name: np.asarray(v)
            for spec, v in zip(self.program.outputs, values[:fetched], strict=True)
        }
        check_outputs(outputs, {spec.name: expected[spec.name] for spec in self.program.outputs})
        return outputs

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
        with self._lock:
            self._shapes[key] = types
            if len(self._shapes) > _SHAPE_CACHE_SIZE:
                self._shapes.popitem(last=False)
        return types

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


def _quiet_run() -> ort.RunOptions:
    """A failed run is the caller's error, reported typed: onnxruntime must not log it to stderr."""
    options = ort.RunOptions()
    options.log_severity_level = 4
    options.logid = "graphgate"
    return options


# Made once: Run only reads its options, so every request and thread shares these.
_QUIET_RUN: Final = _quiet_run()


def _session(
    model: bytes, options: ort.SessionOptions, providers: list[str]
) -> ort.InferenceSession:
    if providers[0] != CUDA:
        return ort.InferenceSession(model, options, providers=providers)
    # Without CUDA libraries onnxruntime logs a multi-line error at its default level while
    # falling back to CPU; quiet its process-wide logger for that moment and log once ourselves.
    ort.set_default_logger_severity(4)
    try:
        return ort.InferenceSession(model, options, providers=providers)
    finally:
        ort.set_default_logger_severity(2)


def compile(program: ValidatedProgram, options: SessionOptions = SessionOptions()) -> CompiledModel:
    """Lowers, gates and builds the session. Raises GateError or LoweringError (SessionRefused
    when onnxruntime cannot run the model; all GraphErrors)."""
    lowered = lower(program)
    gate.check(lowered.model)
    if disagreements := gate.cross_check_shapes(lowered.model, lowered.values):
        # A bug in a rule or a lowering, never the uploader's fault: refuse to serve it.
        raise gate.GateError(
            f"ONNX shape inference disagrees with the validator on {len(disagreements)} values: "
            + "; ".join(disagreements[:5])
        )
    model_bytes = lowered.model.SerializeToString()
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = options.intra_op_threads
    session_options.inter_op_num_threads = options.inter_op_threads
    session_options.log_severity_level = 3  # a missing CUDA library is our one log line, below
    providers = choose_providers(options.use_cuda)
    try:
        session = _session(model_bytes, session_options, providers)
    except _ORT_ERRORS as e:
        # e.g. no kernel for a dtype (onnxruntime's CPU has no float64 Conv): refused, typed.
        raise SessionRefused(
            f"onnxruntime cannot build a session for this model: {str(e).splitlines()[0][:300]}"
        ) from None
    chosen = session.get_providers()[0]
    if providers[0] == CUDA and chosen != CUDA:
        log.warning("CUDA execution provider unavailable (missing CUDA libraries?); running on CPU")
    output_names = tuple(o.name for o in lowered.model.graph.output)
    return CompiledModel(
        program,
        model_bytes,
        session,
        chosen,
        output_names,
        options.max_request_bytes,
        lowered.checks,
    )
