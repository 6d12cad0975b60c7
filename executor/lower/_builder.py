"""OnnxBuilder: accumulates ONNX nodes and initializers with collision-free, traceable names."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executor.lower._ranges import (
    INTEGER_TYPES,
    NEVER_EMPTY,
    GraphFacts,
    cast_to,
    value_range,
)
from executor.runtime_checks import HostIndexCheck, IndexCheck, ShapeIndexCheck, op_label
from graph_proto.types import DType
from validator import GraphError, TensorType
from validator.diagnostics import Code

ONNX_OPSET: Final = 17
IR_VERSION: Final = 8  # the IR version of opset 17; every onnxruntime >= 1.11 accepts it

ONNX_DTYPE: Final = {
    DType.BOOL: TensorProto.BOOL,
    DType.INT16: TensorProto.INT16,
    DType.INT32: TensorProto.INT32,
    DType.INT64: TensorProto.INT64,
    DType.FP16: TensorProto.FLOAT16,
    DType.FP32: TensorProto.FLOAT,
    DType.FP64: TensorProto.DOUBLE,
    DType.UINT8: TensorProto.UINT8,
    DType.INT8: TensorProto.INT8,
    DType.BF16: TensorProto.BFLOAT16,
}


class LoweringError(GraphError):
    """The lowering of an op that passed validation failed: a graphgate bug (what the lowering
    cannot compute exactly is the validator's to refuse), refused, never approximated.

    The converter fills in the Paddle op it was lowering (`block`, `op_index`, `op_type`), so the
    diagnostic points at it like the validator's own do."""

    code = Code.LOWERING_FAILED

    def __init__(
        self,
        message: str,
        *,
        block: int | None = None,
        op_index: int | None = None,
        op_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.block = block
        self.op_index = op_index
        self.op_type = op_type


@dataclass(frozen=True, slots=True)
class Value:
    """An ONNX value standing for a Paddle variable: its name and what inference knows of it."""

    name: str
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return len(self.type.shape)


class OnnxBuilder:
    """Nodes and initializers of one graph. `outputs` holds the inferred types of the op being
    lowered (set by the converter before each emit), so emitters can use static shapes."""

    def __init__(self, opset: int = ONNX_OPSET) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.outputs: list[TensorType | tuple[TensorType, ...]] = []
        self._prefix = ""
        self._count = 0
        self._consts: dict[tuple[str, bytes, tuple[int, ...]], str] = {}
        # Range guards' failing Reshape nodes, by node name (to explain the failure)
        self.index_checks: dict[str, IndexCheck] = {}
        # Checks the session makes on the feeds before running, in place of a guard in the graph:
        # of fed indices, and of indices the graph computes from a feed's dims (position ids)
        self.host_checks: list[HostIndexCheck] = []
        self.shape_checks: list[ShapeIndexCheck] = []
        # Set by the converter: the graph inputs (named after their feeds) and their ranks, and
        # whether the op being lowered sits in a sub-block (an If branch or Loop body: it may
        # never run)
        self.feeds: Mapping[str, int] = {}
        self.params: Mapping[str, np.ndarray] = {}  # the program's (set by the converter too)
        self.integer_params: frozenset[str] = frozenset()
        self.in_block = False
        # Set by the converter for the serving form of a program whose shapes the feeds' shapes
        # decide: lowerings may then take a value as non-empty where only an empty one would
        # need run-time shape arithmetic (see assume_nonempty); the session checks each
        # request's shapes against the values so taken (`nonempty`, ONNX names).
        self.lean = False
        self.nonempty: list[str] = []
        # What made each value (node or constant), for lowerings that look at where a value
        # came from (dim_of)
        self._producers: dict[str, onnx.NodeProto] = {}
        self._constants: dict[str, np.ndarray] = {}

    @contextmanager
    def naming(self, prefix: str) -> Iterator[None]:
        """Prefixes every value created inside, e.g. with the Paddle op's index and type."""
        outer, self._prefix = self._prefix, f"{prefix}/"
        try:
            yield
        finally:
            self._prefix = outer

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{self._prefix}{hint}_{self._count}"

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        """Adds one single-output node and returns its output name."""
        (out,) = self.op_n(op_type, *inputs, n_outputs=1, **attrs)
        return out

    def op_n(self, op_type: str, *inputs: str, n_outputs: int, **attrs: Any) -> tuple[str, ...]:
        outputs = tuple(self.fresh(op_type.lower()) for _ in range(n_outputs))
        node = helper.make_node(op_type, list(inputs), list(outputs), **attrs)
        node.name = self.fresh(f"node_{op_type}")
        self.nodes.append(node)
        for name in outputs:
            self._producers[name] = node
        return outputs

    def const(
        self, value: np.ndarray | Sequence[Any], dtype: Any = None, hint: str = "const"
    ) -> str:
        """An initializer holding `value`; identical small constants are shared."""
        array = np.asarray(value, dtype=dtype)
        key = (str(array.dtype), array.tobytes(), array.shape)
        if array.size <= 64 and key in self._consts:
            return self._consts[key]
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(array, name))
        if array.size <= 64:
            self._consts[key] = name
            self._constants[name] = array
        return name

    def dim_of(self, name: str) -> tuple[str, int] | None:
        """(X, i) when the value `name` (one integer, any rank) is X's dim i as this builder
        made it: Shape(X), then a slice or gather of one element, with casts and reshapes on
        the way (`paddle.shape(x)[i]`); None when it may be anything else."""
        node = self._producers.get(name)
        while node is not None and node.op_type in _ONE_VALUE_PASSES:
            if node.op_type == "Cast" and cast_to(node) not in INTEGER_TYPES:
                return None
            node = self._producers.get(node.input[0])
        if node is None or node.op_type not in ("Slice", "Gather"):
            return None
        index = self._picked_index(node)
        shape = self._producers.get(node.input[0])
        while shape is not None and shape.op_type == "Cast":  # Shape's int64 as Paddle's int32
            shape = self._producers.get(shape.input[0])
        if index is None or shape is None or shape.op_type != "Shape" or shape.attribute:
            return None  # (a Shape with start/end numbers its dims from there)
        return shape.input[0], index

    def same_dim(self, name: str, axis: int) -> tuple[str, int]:
        """The earliest (value, axis) whose dim is, by construction, `name`'s dim `axis`: back
        through Transposes and through Reshapes whose constant target copies that dim (a 0,
        allowzero 0), as a channel shuffle's reshape, transpose, reshape makes them."""
        while (node := self._producers.get(name)) is not None:
            if node.op_type == "Transpose":
                perm = next(list(a.ints) for a in node.attribute if a.name == "perm")
                name, axis = node.input[0], perm[axis]
            elif node.op_type == "Reshape" and not any(a.i for a in node.attribute):
                target = self._constants.get(node.input[1])
                if target is None or axis >= target.size or int(target[axis]) != 0:
                    break
                name = node.input[0]
            else:
                break
        return name, axis

    def _picked_index(self, node: onnx.NodeProto) -> int | None:
        """The one index >= 0 a Slice (constant starts/ends, axis 0, step 1) or a Gather
        (constant 0-D or 1-element index, axis 0) takes from a vector; None otherwise."""
        inputs = [self._constants.get(name) for name in node.input[1:]]
        if any(value is None for value in inputs) or any(a.i != 0 for a in node.attribute):
            return None
        values = [int(v) for value in inputs if value is not None for v in value.reshape(-1)]
        if node.op_type == "Gather":
            return values[0] if len(values) == 1 and values[0] >= 0 else None
        start, end, *rest = values  # starts, ends, then axes and steps when given
        if rest not in ([], [0], [0, 1]) or start < 0 or end != start + 1:
            return None
        return start

    def ints(self, values: Sequence[int]) -> str:
        """A 1-D int64 constant (shapes, axes, starts, ...)."""
        return self.const(np.asarray(list(values), dtype=np.int64), hint="i64")

    def scalar(self, value: float | int | bool, dtype: DType) -> str:
        """A 0-D constant of a Paddle dtype."""
        return self.const(np.asarray(value, dtype=dtype.numpy), hint="scalar")

    def cast(self, name: str, dtype: DType) -> str:
        return self.op("Cast", name, to=ONNX_DTYPE[dtype])

    def guard_range(self, indices: str, rank: int, low: str, high: str, check: IndexCheck) -> str:
        """`indices` as they are when every value v has low <= v < high (0-D bounds of their
        dtype); otherwise the request fails at the returned value's Reshape node, which
        RuntimeChecks.explain() explains as `check` says. Consumers read the returned value, so none runs
        on indices outside.

        Why not Gather's own check: onnxruntime's CUDA Gather has none (microsoft/onnxruntime
        #10234), it reads out of bounds. Reshape checks the element count on the host for every
        provider (CUDA takes its shape input in host memory): the shape asked for is the indices'
        own times `inside` (1 or 0), all zeros when a value is outside, which mismatches unless
        there are no values (and then none is outside).

        Indices that are a feed as is are checked on the host instead (see _checked_on_host),
        and so are indices whose range the nodes that made them tell (_checked_by_range): the
        graph reads them unguarded."""
        if self._checked_on_host(check) or self._checked_by_range(indices, check):
            return indices
        lowest = self.op("ReduceMin", indices, keepdims=0)
        highest = self.op("ReduceMax", indices, keepdims=0)
        inside = self.op(
            "And", self.op("GreaterOrEqual", lowest, low), self.op("Less", highest, high)
        )
        flat = indices if rank > 0 else self.op("Reshape", indices, self.ints([1]))
        shape = self.op("Mul", self.op("Shape", flat), self.cast(inside, DType.INT64))
        guarded = self.op("Reshape", flat, shape, allowzero=1)
        self.index_checks[self.nodes[-1].name] = check
        return guarded if rank > 0 else self.op("Reshape", guarded, self.ints([]))

    def _checked_on_host(self, check: IndexCheck) -> bool:
        """Records a HostIndexCheck when the session can make `check` on the feeds before
        running: the indices are a graph input no op rewrote (every caller guards them or a
        value-preserving copy: a flattening Reshape, a widening Cast), the op runs on every
        request (main graph), and the size is known now or is a dim of a feed. The guard in
        the graph would cost a reduction and, on CUDA, a device-to-host copy of its shape."""
        size = check.size
        if self.in_block or check.indices is None or check.indices not in self.feeds:
            return False
        if size is None or (isinstance(size, tuple) and size[0] not in self.feeds):
            return False
        self.host_checks.append(HostIndexCheck(self._op_label(), check))
        return True

    def _checked_by_range(self, indices: str, check: IndexCheck) -> bool:
        """Whether `check` needs no guard: the values' range (lower/_ranges.py) lies inside the
        accepted one, or its top follows a feed dim and, in a lean lowering (whose session
        checks each request's shapes) of an op that runs on every request, is checked on that
        dim before the run (a ShapeIndexCheck, refusing exactly what the guard would)."""
        if not isinstance(check.size, int):
            return False
        facts = GraphFacts(
            self._producers,
            self._constants,
            self.params,
            self.integer_params,
            self.feeds,
            self.dim_of,
        )
        found = value_range(indices, facts)
        if found is None or found.low.dim is not None:
            return False
        lowest, highest = check.accepted(check.size)
        if found.low.const < lowest:
            return False
        if found.high.dim is None:
            return found.high.const <= highest
        exact = found.exact and found.empty_with is not None and found.high.coef > 0
        if not (self.lean and exact and not self.in_block):
            return False
        empty_with = None if found.empty_with == NEVER_EMPTY else found.empty_with
        self.shape_checks.append(ShapeIndexCheck(self._op_label(), check, found.high, empty_with))
        return True

    def _op_label(self) -> str:
        """The main-graph op being lowered, as a guard's failure names it."""
        index, op_type = self._prefix.rstrip("/").split("_", 1)
        return op_label(None, index, op_type)

    def assume_nonempty(self, x: Value) -> bool:
        """Whether the lowering may take X as holding at least one element (and so lower as if
        it does), recording it: in a lean lowering, for a value of the main graph (a sub-block
        may never run, or run on other shapes than the request's)."""
        if not self.lean or self.in_block:
            return False
        self.nonempty.append(x.name)
        return True

    def out(self, index: int = 0) -> TensorType:
        """The inferred type of the op's used output number `index` (not variadic)."""
        value = self.outputs[index]
        assert isinstance(value, TensorType)
        return value


# Nodes that hand one integer on unchanged (a cast of a shape value, a change of rank).
_ONE_VALUE_PASSES: Final = frozenset({"Cast", "Reshape", "Squeeze", "Unsqueeze", "Identity"})
