"""Recurrent nets: Paddle's fused `rnn` op, as paddle.nn.LSTM, GRU and SimpleRNN export it.

Layout (phi/kernels/cpu/rnn_kernel.cc, rnn_functor.h):
- Input is time-major [T, B, I] (batch-major layers wrap the op in transpose2 ops).
- PreState holds the initial states, each [num_layers * directions, B, H]: h (and c for LSTM).
- WeightList holds every weight first, then every bias: for each layer, for each direction,
  (weight_ih [G*H, in], weight_hh [G*H, H]), then in the same order (bias_ih, bias_hh) [G*H].
  G is the number of gates: LSTM 4 (i, f, c, o), GRU 3 (r, z, c), simple RNN 1.
- Out [T, B, directions * H] concatenates the forward and backward outputs on the last axis.
- SequenceLength [B]: steps at or past a row's length output zeros and keep the state, so the
  final state is the one at the last valid step (for the backward direction, step 0, the
  reverse pass starting at length - 1).
- In inference (is_test) the kernel skips the dropout between layers whatever dropout_prob is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto.types import INDICES, DType, Shape
from validator.diagnostics import Code
from validator.ops._cases import f32
from validator.ops._def import (
    AttrError,
    BatchView,
    Case,
    Couples,
    DTypeError,
    EmptyDimError,
    GraphError,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)
from validator.ops._shape import merge_dim, require_rank

GATES: Final = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
MAX_LAYERS: Final = 64  # a bound on emitted nodes; real stacks have a handful of layers


class RnnUnsupportedError(GraphError):
    """A valid Paddle rnn variant whose results graphgate cannot reproduce exactly."""

    code = Code.RNN_UNSUPPORTED


@dataclass(frozen=True, slots=True)
class RnnAttrs:
    mode: str
    hidden_size: int
    input_size: int
    num_layers: int = 1
    is_bidirec: bool = False
    dropout_prob: float = 0.0
    is_test: bool = False
    seed: int = 0  # only seeds training dropout, which is rejected


@dataclass(frozen=True, slots=True)
class RnnSpec:
    """What the attrs fix: gate count, directions, state count and sizes per layer."""

    gates: int
    directions: int
    states: int
    hidden: int
    layers: int
    input_size: int

    def layer_input(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.directions * self.hidden

    def weight_index(self, layer: int, direction: int, hh: bool, bias: bool) -> int:
        """Position in WeightList of one layer/direction's weight_ih/_hh or bias_ih/_hh."""
        index = (layer * self.directions + direction) * 2 + int(hh)
        return index + 2 * self.layers * self.directions if bias else index

    @property
    def weight_count(self) -> int:
        return 4 * self.layers * self.directions


def rnn_spec(a: RnnAttrs) -> RnnSpec:
    """Checks the attrs; rejects what cannot be computed exactly (training dropout)."""
    if a.mode not in GATES:
        raise AttrError(f"mode must be one of {list(GATES)}, got {a.mode!r}")
    if a.hidden_size < 1:
        raise AttrError(f"hidden_size must be >= 1, got {a.hidden_size}")
    if a.input_size < 1:
        raise AttrError(f"input_size must be >= 1, got {a.input_size}")
    if not 1 <= a.num_layers <= MAX_LAYERS:
        raise AttrError(f"num_layers must be in [1, {MAX_LAYERS}], got {a.num_layers}")
    if not 0.0 <= a.dropout_prob <= 1.0:
        raise AttrError(f"dropout_prob must be in [0, 1], got {a.dropout_prob}")
    if not a.is_test and a.dropout_prob > 0 and a.num_layers > 1:
        # NOTE: in training mode the kernel drops activations between layers at random.
        raise RnnUnsupportedError(
            f"expected is_test true or dropout_prob 0 (inference), got is_test false with "
            f"dropout_prob {a.dropout_prob} between {a.num_layers} layers (random dropout)"
        )
    return RnnSpec(
        gates=GATES[a.mode],
        directions=2 if a.is_bidirec else 1,
        states=2 if a.mode == "LSTM" else 1,
        hidden=a.hidden_size,
        layers=a.num_layers,
        input_size=a.input_size,
    )


def _require_dims(t: TensorType, expected: Shape, what: str) -> Shape:
    """Merges t's dims with the expected ones (-1 in either: whichever is known)."""
    if t.rank != len(expected):
        raise ShapeError(f"{what}: expected dims {list(expected)}, got {list(t.shape)}")
    try:
        return tuple(merge_dim(d, e, what) for d, e in zip(t.shape, expected, strict=True))
    except ShapeError:
        raise ShapeError(f"{what}: expected dims {list(expected)}, got {list(t.shape)}") from None


def _check_weights(weights: tuple[TensorType, ...], s: RnnSpec) -> None:
    if len(weights) != s.weight_count:
        raise ShapeError(
            f"WeightList: expected {s.weight_count} tensors ({s.layers} layers x "
            f"{s.directions} directions x 4), got {len(weights)}"
        )
    rows = s.gates * s.hidden
    for layer in range(s.layers):
        for d in range(s.directions):
            where = f"layer {layer}, direction {d}"
            for hh, bias, dims, name in (
                (False, False, (rows, s.layer_input(layer)), "weight_ih"),
                (True, False, (rows, s.hidden), "weight_hh"),
                (False, True, (rows,), "bias_ih"),
                (True, True, (rows,), "bias_hh"),
            ):
                k = s.weight_index(layer, d, hh, bias)
                _require_dims(weights[k], dims, f"WeightList[{k}] ({name}, {where})")


def _check_lengths(lengths: TensorType, steps: int, batch: int) -> int:
    require_rank(lengths, (1,), "SequenceLength")
    if lengths.dtype not in INDICES:
        raise DTypeError(
            f"input 'SequenceLength': expected int32 or int64, got {lengths.dtype.label}"
        )
    batch = merge_dim(batch, lengths.shape[0], "SequenceLength dim 0 and the batch (Input dim 1)")
    if lengths.value is not None and steps >= 0:
        # NOTE: Paddle's mask fill writes outside its row for lengths out of [0, T].
        bad = [int(v) for v in lengths.value if not 0 <= int(v) <= steps]
        if bad:
            raise ShapeError(f"SequenceLength: expected values in [0, {steps}], got {bad}")
    return batch


def _rnn_infer(
    x: TensorType,
    pre_state: tuple[TensorType, ...],
    weights: tuple[TensorType, ...],
    lengths: TensorType | None,
    a: RnnAttrs,
) -> list[Any]:
    s = rnn_spec(a)
    if x.dtype != DType.FP32:
        raise RnnUnsupportedError(
            f"expected float32 (onnxruntime's LSTM, GRU and RNN kernels), got {x.dtype.label}"
        )
    require_rank(x, (3,), "Input")
    steps, batch, features = x.shape
    if 0 in (steps, batch):
        raise EmptyDimError(f"Input: expected non-empty time and batch dims, got {list(x.shape)}")
    merge_dim(features, a.input_size, "Input dim 2 and input_size")
    if len(pre_state) != s.states:
        raise ShapeError(
            f"PreState: expected {s.states} tensors for mode {a.mode}, got {len(pre_state)}"
        )
    rows = s.layers * s.directions
    for i, state in enumerate(pre_state):
        dims = _require_dims(state, (rows, batch, s.hidden), f"PreState[{i}]")
        batch = dims[1]
    _check_weights(weights, s)
    if lengths is not None:
        batch = _check_lengths(lengths, steps, batch)
    out = (steps, batch, s.directions * s.hidden)
    return [out, tuple((rows, batch, s.hidden) for _ in pre_state)]


def _rnn_cost(
    x: TensorType,
    _pre_state: tuple[TensorType, ...],
    _weights: tuple[TensorType, ...],
    _lengths: TensorType | None,
    _outputs: list[Any],
    a: RnnAttrs,
) -> int:
    """Per step and row: the input and hidden matmuls of every layer and direction (2 FLOPs per
    multiply-accumulate), plus about 8 FLOPs per gate element for biases and activations."""
    s = rnn_spec(a)
    rows = TensorType(x.dtype, x.shape[:2]).numel()
    gate_units = s.gates * s.hidden
    per_row = sum(
        s.directions * (2 * gate_units * (s.layer_input(layer) + s.hidden) + 8 * gate_units)
        for layer in range(s.layers)
    )
    return rows * per_row


# numpy reference: the kernel's loop, step by step, in float64 ----------------------------------


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-v)))


def _cell(
    mode: str, xg: np.ndarray, h: np.ndarray, c: np.ndarray, w_hh: np.ndarray, b_hh: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One step: xg = x @ W_ih^T + b_ih; returns the new (h, c)."""
    hg = h @ w_hh.T + b_hh
    if mode == "LSTM":
        i, f, g, o = np.split(xg + hg, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        return _sigmoid(o) * np.tanh(c), c
    if mode == "GRU":
        xr, xz, xc = np.split(xg, 3, axis=-1)
        hr, hz, hc = np.split(hg, 3, axis=-1)
        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
        candidate = np.tanh(xc + r * hc)  # reset applied after the hidden matmul
        return z * h + (1 - z) * candidate, c
    pre = xg + hg
    return (np.tanh(pre) if mode == "RNN_TANH" else np.maximum(pre, 0)), c


def _direction(
    mode: str,
    x: np.ndarray,
    w: Sequence[np.ndarray],
    h: np.ndarray,
    c: np.ndarray,
    lengths: np.ndarray,
    reverse: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w_ih, w_hh, b_ih, b_hh = w
    out = np.zeros((x.shape[0], x.shape[1], h.shape[-1]))
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for t in steps:
        new_h, new_c = _cell(mode, x[t] @ w_ih.T + b_ih, h, c, w_hh, b_hh)
        valid = (t < lengths)[:, None]
        h, c = np.where(valid, new_h, h), np.where(valid, new_c, c)
        out[t] = np.where(valid, new_h, 0.0)
    return out, h, c


def rnn_reference(
    x: np.ndarray,
    pre_state: tuple[np.ndarray, ...],
    weights: tuple[np.ndarray, ...],
    lengths: np.ndarray | None,
    a: RnnAttrs,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    s = rnn_spec(a)
    steps = x.shape[0]
    valid = np.full(x.shape[1], steps) if lengths is None else lengths.astype(np.int64)
    h0 = pre_state[0].astype(np.float64)
    c0 = pre_state[1].astype(np.float64) if s.states == 2 else np.zeros_like(h0)
    ws = [w.astype(np.float64) for w in weights]
    layer_in, hs, cs = x.astype(np.float64), [], []
    for layer in range(s.layers):
        outs = []
        for d in range(s.directions):
            k = layer * s.directions + d
            w = [
                ws[s.weight_index(layer, d, hh, bias)]
                for bias in (False, True)
                for hh in (False, True)
            ]
            out, h, c = _direction(a.mode, layer_in, w, h0[k], c0[k], valid, reverse=d == 1)
            outs.append(out)
            hs.append(h)
            cs.append(c)
        layer_in = np.concatenate(outs, axis=-1)
    states = (np.stack(hs), np.stack(cs))[: s.states]
    return layer_in.astype(x.dtype), tuple(st.astype(x.dtype) for st in states)


# cases -----------------------------------------------------------------------------------------


def _weights(s: RnnSpec, scale: float = 0.5) -> tuple[np.ndarray, ...]:
    """A WeightList for the spec, in Paddle's order (every weight, then every bias)."""
    rows = s.gates * s.hidden
    mats: list[np.ndarray] = []
    biases: list[np.ndarray] = []
    for layer in range(s.layers):
        for _ in range(s.directions):
            mats += [scale * f32(rows, s.layer_input(layer)), scale * f32(rows, s.hidden)]
            biases += [scale * f32(rows), scale * f32(rows)]
    return tuple(mats + biases)


def _rnn_case(
    mode: str,
    steps: int = 5,
    batch: int = 3,
    layers: int = 1,
    bidirec: bool = False,
    lengths: Sequence[int] | None = None,
    raises: str = "",
    code: Code | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
    **attrs: Any,
) -> Case:
    """A case for `mode` with I = 4, H = 3; `edit` changes the inputs to make a broken one."""
    a: dict[str, Any] = {
        "mode": mode,
        "hidden_size": 3,
        "input_size": 4,
        "num_layers": layers,
        "is_bidirec": bidirec,
        "is_test": True,
    } | attrs
    gates, directions = GATES.get(mode, 1), 2 if bidirec else 1
    s = RnnSpec(gates, directions, 2 if mode == "LSTM" else 1, 3, max(layers, 1), 4)
    rows = s.layers * s.directions
    inputs: dict[str, Any] = {
        "Input": f32(steps, batch, 4),
        "PreState": tuple(f32(rows, batch, 3) for _ in range(s.states)),
        "WeightList": _weights(s),
    }
    if lengths is not None:
        inputs["SequenceLength"] = np.asarray(lengths, np.int64)
    if edit is not None:
        edit(inputs)
    if raises:
        return Case(inputs, a, raises=raises, code=code)
    return Case(inputs, a, expect=rnn_reference, rtol=1e-4, atol=1e-5)


def _set(slot: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(inputs: dict[str, Any]) -> None:
        inputs[slot] = value

    return edit


def _float64(inputs: dict[str, Any]) -> None:
    for slot in ("Input", "PreState", "WeightList"):
        value = inputs[slot]
        inputs[slot] = (
            tuple(v.astype(np.float64) for v in value)
            if isinstance(value, tuple)
            else value.astype(np.float64)
        )


def _drop_weight(inputs: dict[str, Any]) -> None:
    inputs["WeightList"] = inputs["WeightList"][:-1]


def _wide_bias(inputs: dict[str, Any]) -> None:
    weights = list(inputs["WeightList"])
    weights[-1] = f32(13)
    inputs["WeightList"] = tuple(weights)


# fmt: off
_RNN_CASES: Final = (
    _rnn_case("LSTM"),
    _rnn_case("LSTM", layers=2, bidirec=True, lengths=[5, 2, 0]),
    _rnn_case("LSTM", steps=4, batch=1, bidirec=True, lengths=[3]),
    _rnn_case("GRU", layers=2, lengths=[1, 5, 3]),
    _rnn_case("GRU", bidirec=True, dropout_prob=0.5),
    _rnn_case("RNN_TANH", layers=2, bidirec=True),
    _rnn_case("RNN_RELU", lengths=[4, 4, 5]),
    _rnn_case("RNN_RELU", layers=3, bidirec=True, lengths=[2, 1, 5], is_test=False),
    _rnn_case("GRU", layers=2, dropout_prob=0.1, is_test=False,
              raises="expected is_test true or dropout_prob 0 (inference), got is_test false",
              code=Code.RNN_UNSUPPORTED),
    _rnn_case("LSTM", edit=_float64,
              raises="expected float32 (onnxruntime's LSTM, GRU and RNN kernels), got float64",
              code=Code.RNN_UNSUPPORTED),
    _rnn_case("LSTM_PEEPHOLE", raises="mode must be one of", code=Code.ATTR_VALUE),
    _rnn_case("GRU", hidden_size=0, raises="hidden_size must be >= 1, got 0", code=Code.ATTR_VALUE),
    _rnn_case("GRU", num_layers=0, raises="num_layers must be in [1, 64], got 0", code=Code.ATTR_VALUE),
    _rnn_case("GRU", dropout_prob=1.5, raises="dropout_prob must be in [0, 1], got 1.5", code=Code.ATTR_VALUE),
    _rnn_case("GRU", input_size=5, raises="Input dim 2 and input_size: expected equal sizes, got 4 and 5", code=Code.SHAPE_MISMATCH),
    _rnn_case("GRU", edit=_set("Input", f32(5, 4)), raises="Input: expected rank [3], got 2",
              code=Code.AXIS_INVALID),
    _rnn_case("GRU", steps=0, raises="expected non-empty time and batch dims, got [0, 3, 4]",
              code=Code.EMPTY_DIM),
    _rnn_case("LSTM", edit=_set("PreState", (f32(1, 3, 3),)),
              raises="PreState: expected 2 tensors for mode LSTM, got 1", code=Code.SHAPE_MISMATCH),
    _rnn_case("GRU", bidirec=True, edit=_set("PreState", (f32(1, 3, 3),)),
              raises="PreState[0]: expected dims [2, 3, 3], got [1, 3, 3]", code=Code.SHAPE_MISMATCH),
    _rnn_case("GRU", layers=2, edit=_drop_weight,
              raises="WeightList: expected 8 tensors (2 layers x 1 directions x 4), got 7", code=Code.SHAPE_MISMATCH),
    _rnn_case("RNN_TANH", edit=_wide_bias,
              raises="WeightList[3] (bias_hh, layer 0, direction 0): expected dims [3], got [13]", code=Code.SHAPE_MISMATCH),
    _rnn_case("GRU", lengths=[1, 2], raises="SequenceLength dim 0 and the batch (Input dim 1)", code=Code.SHAPE_MISMATCH),
    _rnn_case("GRU", lengths=[1, 6, -1], raises="SequenceLength: expected values in [0, 5], got [6, -1]", code=Code.SHAPE_MISMATCH),
    _rnn_case("GRU", edit=_set("SequenceLength", np.ones(3, np.float32)),
              raises="input 'SequenceLength': expected int32 or int64, got float32",
              code=Code.DTYPE_MISMATCH),
)
# fmt: on


def _rnn_batch(view: BatchView) -> Mapping[str, int | None]:
    """Paddle's rnn op is time-major: Input [T, B, I] and each PreState [L*D, B, H] carry the
    batch at axis 1 (a batch-major model transposes around it); SequenceLength is [B]."""
    if any(a is not None for a in view.axes["WeightList"]):
        raise Couples("runs with batched weights")
    expected = {"Input": 1, "PreState": 1, "SequenceLength": 0}
    for slot, axis in expected.items():
        got = view.axes.get(slot, ())
        if any(a != axis for a in got):
            where = (
                "no batch dimension"
                if None in got
                else f"it at axis {next(a for a in got if a != axis)}"
            )
            raise Couples(f"expected the batch dimension at axis {axis} of {slot!r}, got {where}")
    return {"Out": 1, "State": 1}


RNN = OpDef(
    op_type="rnn",
    doc="Multi-layer LSTM, GRU or simple RNN over time-major Input [T, B, I], as paddle.nn "
    "exports it; Out [T, B, directions * H] and the final states of every layer and direction.",
    inputs=(
        In("Input"),
        In("PreState", variadic=True),
        In("WeightList", variadic=True),
        In("SequenceLength", None, optional=True),
    ),
    outputs=(
        Out("Out"),
        Out("State", variadic=True),
        Out("Reserve", DType.UINT8, unused=True, optional=True),
        Out("DropoutState", DType.UINT8, unused=True, optional=True),
    ),
    types={"T": frozenset({DType.FP32, DType.FP64})},
    attrs=RnnAttrs,
    infer=_rnn_infer,
    batch=_rnn_batch,
    cost=_rnn_cost,
    cases=_RNN_CASES,
)

OPS = (RNN,)

__all__ = ["GATES", "OPS", "RNN", "RnnAttrs", "RnnSpec", "RnnUnsupportedError", "rnn_spec"]
