"""ONNX lowering of validator/ops/rnn.py: one ONNX LSTM, GRU or RNN node per layer (both
directions in one node), with Paddle's gate order and sequence masking mapped exactly.

- Gates: Paddle's LSTM rows are (i, f, c, o), ONNX's (i, o, f, c); Paddle's GRU rows are
  (r, z, c), ONNX's (z, r, h). The weights are reordered by Gather nodes on the weight values
  (onnxruntime folds them once: they read initializers only).
- Paddle's GRU adds the hidden bias of the candidate inside the reset product, r * (W_hc h +
  b_hc): ONNX GRU with linear_before_reset=1.
- Lengths: ONNX zeroes the outputs past a row's length and returns the state at its last valid
  step, as Paddle does; the one difference is a zero length, where onnxruntime returns zeros
  and Paddle the initial state, so those rows take the initial state back with Where.
"""

from __future__ import annotations

from typing import Any, Final

from executor.lower._builder import OnnxBuilder, Value
from executor.runtime_checks import IndexCheck
from graph_proto.types import DType
from validator.ops.rnn import RnnAttrs, RnnSpec, rnn_spec

ONNX_OP: Final = {"LSTM": "LSTM", "GRU": "GRU", "RNN_TANH": "RNN", "RNN_RELU": "RNN"}
# ONNX gate k comes from Paddle gate GATE_ORDER[mode][k].
GATE_ORDER: Final = {"LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2), "RNN_TANH": (0,), "RNN_RELU": (0,)}


def _reorder(b: OnnxBuilder, name: str, s: RnnSpec, mode: str) -> str:
    """Rows of a [G*H, ...] weight or [G*H] bias in ONNX's gate order."""
    order = GATE_ORDER[mode]
    if order == tuple(range(len(order))):
        return name
    gates = b.op("Reshape", name, b.ints([s.gates, s.hidden, -1]))
    picked = b.op("Gather", gates, b.ints(order), axis=0)
    return b.op("Reshape", picked, b.ints([s.gates * s.hidden, -1]))


def _stack_directions(b: OnnxBuilder, parts: list[str]) -> str:
    """[D, ...] from one tensor per direction."""
    expanded = [b.op("Unsqueeze", p, b.ints([0])) for p in parts]
    return expanded[0] if len(expanded) == 1 else b.op("Concat", *expanded, axis=0)


def _layer_weights(
    b: OnnxBuilder, weights: tuple[Value, ...], s: RnnSpec, mode: str, layer: int
) -> tuple[str, str, str]:
    """ONNX W [D, G*H, in], R [D, G*H, H] and B [D, 2*G*H] of one layer."""
    w: list[str] = []
    r: list[str] = []
    biases: list[str] = []
    for d in range(s.directions):
        at = [
            weights[s.weight_index(layer, d, hh, bias)].name
            for bias in (False, True)
            for hh in (False, True)
        ]
        w_ih, w_hh, b_ih, b_hh = (_reorder(b, name, s, mode) for name in at)
        w.append(w_ih)
        r.append(w_hh)
        flat = [b.op("Reshape", v, b.ints([-1])) for v in (b_ih, b_hh)]
        biases.append(b.op("Concat", *flat, axis=0))
    return _stack_directions(b, w), _stack_directions(b, r), _stack_directions(b, biases)


def _node_attrs(s: RnnSpec, mode: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "hidden_size": s.hidden,
        "direction": "bidirectional" if s.directions == 2 else "forward",
    }
    if mode == "GRU":
        attrs["linear_before_reset"] = 1
    if mode.startswith("RNN_"):
        attrs["activations"] = ["Tanh" if mode == "RNN_TANH" else "Relu"] * s.directions
    return attrs


def _lengths(b: OnnxBuilder, x: Value, lengths: Value) -> tuple[str, str]:
    """int32 lengths for the ONNX node, and a [1, B, 1] mask of empty rows.

    Lengths outside [0, T] fail the request (IndexOutOfRange): Paddle's output is undefined
    for them (its mask fill writes outside the row). The validator rejects them when it knows
    the values; the range check (on the host for fed lengths, OnnxBuilder.guard_range) refuses
    them at run time."""
    wide = lengths.name if lengths.dtype == DType.INT64 else b.cast(lengths.name, DType.INT64)
    check = IndexCheck(
        "SequenceLength",
        lengths.name,
        x.shape[0] if x.shape[0] >= 0 else (x.name, 0),
        inclusive=True,
        size_name="T",
        size_means="the number of steps",
    )
    checked = b.guard_range(wide, 1, b.scalar(0, DType.INT64), _steps_after(b, x), check)
    empty = b.op("Equal", checked, b.scalar(0, DType.INT64))
    return b.cast(checked, DType.INT32), b.op("Unsqueeze", empty, b.ints([0, 2]))


def _steps_after(b: OnnxBuilder, x: Value) -> str:
    """T + 1 (the first length past [0, T]) as a 0-D int64, T being x's dim 0."""
    if x.shape[0] >= 0:
        return b.scalar(x.shape[0] + 1, DType.INT64)
    steps = b.op("Reshape", b.op("Shape", x.name, start=0, end=1), b.ints([]))
    return b.op("Add", steps, b.scalar(1, DType.INT64))


def _sequence_output(b: OnnxBuilder, y: str, s: RnnSpec) -> str:
    """ONNX Y [T, D, B, H] as Paddle's Out [T, B, D*H] (forward then backward features)."""
    if s.directions == 1:
        return b.op("Squeeze", y, b.ints([1]))
    batch_major = b.op("Transpose", y, perm=[0, 2, 1, 3])
    return b.op("Reshape", batch_major, b.ints([0, 0, s.directions * s.hidden]))


def _rnn_emit(
    b: OnnxBuilder,
    x: Value,
    pre_state: tuple[Value, ...],
    weights: tuple[Value, ...],
    lengths: Value | None,
    a: RnnAttrs,
) -> list[Any]:
    s = rnn_spec(a)
    lens, empty = _lengths(b, x, lengths) if lengths is not None else ("", "")
    layer_in = x.name
    finals: list[list[str]] = [[] for _ in range(s.states)]
    for layer in range(s.layers):
        w, r, bias = _layer_weights(b, weights, s, a.mode, layer)
        rows = b.ints([layer * s.directions]), b.ints([(layer + 1) * s.directions])
        initial = [b.op("Slice", state.name, *rows, b.ints([0])) for state in pre_state]
        outputs = b.op_n(
            ONNX_OP[a.mode],
            layer_in,
            w,
            r,
            bias,
            lens,
            *initial,
            n_outputs=1 + s.states,
            **_node_attrs(s, a.mode),
        )
        layer_in = _sequence_output(b, outputs[0], s)
        for i, final in enumerate(outputs[1:]):
            finals[i].append(b.op("Where", empty, initial[i], final) if empty else final)
    states = tuple(f[0] if len(f) == 1 else b.op("Concat", *f, axis=0) for f in finals)
    return [layer_in, states]


EMITTERS: Final = {"rnn": _rnn_emit}
