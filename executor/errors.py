"""Typed run-time errors; each message says what was expected and what was received."""

from __future__ import annotations


class ExecutionError(ValueError):
    """A request the model cannot run (the caller's fault: a 4xx in the service)."""

    code = "EXECUTION_ERROR"


class MissingInput(ExecutionError):
    code = "INPUT_MISSING"


class UnexpectedInput(ExecutionError):
    code = "INPUT_UNEXPECTED"


class WrongDType(ExecutionError):
    code = "INPUT_DTYPE"


class WrongRank(ExecutionError):
    code = "INPUT_RANK"


class WrongShape(ExecutionError):
    code = "INPUT_SHAPE"


class DimConstraintViolated(WrongShape):
    """A feed dim breaks a constraint the program puts on it (validator/dims.py): "chunk_state_h_box
    dim 0 must be 3 (required by block 0, op 3 (split)), got 2"."""


class IncompatibleInputs(ExecutionError):
    """Inputs the program's ops cannot take: dims that do not combine (batch 2 here, 3 there),
    or values that size a tensor impossibly (a range with step 0)."""

    code = "INPUT_INCOMPATIBLE"


class InputTooLarge(ExecutionError):
    code = "INPUT_TOO_LARGE"


class SizeUnbounded(ExecutionError):
    """A tensor sized by input data whose size cannot be known before running."""

    code = "SIZE_UNBOUNDED"


class TensorTooLarge(ExecutionError):
    """A tensor sized by input data would exceed the policy's byte cap."""

    code = "TENSOR_TOO_LARGE"


class RunFailed(ExecutionError):
    """onnxruntime refused the request; the message never quotes onnxruntime's own text."""

    code = "RUN_FAILED"


class IndexOutOfRange(RunFailed):
    """An index in the request's data outside the range its op accepts (Paddle refuses it too)."""

    code = "INDEX_OUT_OF_RANGE"


class LoopTripLimitExceeded(ExecutionError):
    """A while loop needed more iterations than the tenant policy's bound; nothing is returned."""

    code = "LOOP_TRIP_LIMIT"


class OutputMismatch(RuntimeError):
    """An output's shape differs from the re-inferred one: a bug in graphgate, never the caller's."""

    code = "OUTPUT_MISMATCH"


class RequestOverBudget(ExecutionError):
    """The request's FLOPs or live activations at its input shapes are over the tenant's policy;
    nothing ran."""

    code = "REQUEST_OVER_BUDGET"


class DeadlineExceeded(ExecutionError):
    """The request ran past its deadline (the policy's, or a shorter one the client asked for);
    onnxruntime was stopped."""

    code = "DEADLINE_EXCEEDED"


class RunCancelled(ExecutionError):
    """The client went away; its run was stopped."""

    code = "CANCELLED"


class OutOfMemory(MemoryError):
    """onnxruntime could not allocate: the worker is over its memory cap."""

    code = "WORKER_OUT_OF_MEMORY"
