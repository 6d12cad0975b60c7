"""Factories for small, valid programs (every VarDesc declared) on top of ProgramBuilder."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr, ProgramBuilder
from graph_proto.types import DType

FP32: Final = DType.FP32
_RNG = np.random.default_rng(20261201)


@dataclass(frozen=True, slots=True)
class V:
    """An op output to declare: name, dims and dtype of its VarDesc."""

    name: str
    dims: Sequence[int] = ()
    dtype: DType = FP32


@dataclass(frozen=True, slots=True)
class Built:
    """A program's two files, as an upload carries them."""

    program: bytes
    params: bytes | None


class GraphBuilder(ProgramBuilder):
    """ProgramBuilder whose `node()` declares the VarDesc of every output it writes."""

    def node(
        self,
        op_type: str,
        inputs: Mapping[str, Sequence[str]],
        outputs: Mapping[str, Sequence[V | str]],
        attrs: Mapping[str, Any] | None = None,
        *,
        block: int = 0,
    ) -> pb.OpDesc:
        """Appends an op; V outputs get a VarDesc (once), plain names are used as they are."""
        names: dict[str, list[str]] = {}
        for slot, values in outputs.items():
            names[slot] = []
            for value in values:
                if isinstance(value, V):
                    if not any(v.name == value.name for v in self.block(block).vars):
                        self.var(value.name, value.dtype, value.dims, block=block)
                    names[slot].append(value.name)
                else:
                    names[slot].append(value)
        return self.op(op_type, inputs, names, attrs, block=block)

    def built(self) -> Built:
        return Built(self.program_bytes(), self.params_bytes())


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int, for hand-made wire bytes."""
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def weights(*shape: int, dtype: DType = FP32) -> np.ndarray:
    """Deterministic small parameter values of a dtype."""
    if dtype in {DType.INT32, DType.INT64}:
        return _RNG.integers(-3, 4, shape).astype(dtype.numpy)
    return (_RNG.standard_normal(shape) * 0.1).astype(dtype.numpy)


def affine(features: int = 4, *, batch: int = -1) -> GraphBuilder:
    """y = x * scale + bias over x[batch, features]: feed, two params, two elementwise ops, fetch."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [batch, features])
    scale = g.param("scale", weights(features))
    bias = g.param("bias", weights(features))
    g.node("elementwise_mul", {"X": [x], "Y": [scale]}, {"Out": [V("xs", [batch, features])]})
    g.node("elementwise_add", {"X": ["xs"], "Y": [bias]}, {"Out": [V("y", [batch, features])]})
    g.fetch("y")
    return g


def mlp(sizes: Sequence[int] = (8, 16, 4), *, batch: int = -1) -> GraphBuilder:
    """matmul_v2 + bias + relu layers (no relu after the last), then softmax; fetches `probs`."""
    g = GraphBuilder()
    h = g.feed("x", FP32, [batch, sizes[0]])
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        w = g.param(f"fc{i}.w", weights(n_in, n_out))
        b = g.param(f"fc{i}.b", weights(n_out))
        mm = V(f"fc{i}.mm", [batch, n_out])
        g.node(
            "matmul_v2", {"X": [h], "Y": [w]}, {"Out": [mm]}, {"trans_x": False, "trans_y": False}
        )
        h = f"fc{i}.out"
        g.node("elementwise_add", {"X": [mm.name], "Y": [b]}, {"Out": [V(h, [batch, n_out])]})
        if i < len(sizes) - 2:
            g.node("relu", {"X": [h]}, {"Out": [V(f"fc{i}.relu", [batch, n_out])]})
            h = f"fc{i}.relu"
    g.node("softmax", {"X": [h]}, {"Out": [V("probs", [batch, sizes[-1]])]}, {"axis": -1})
    g.fetch("probs")
    return g


def embedding(
    table: np.ndarray, *, padding_idx: int = -1, ids: DType = DType.INT64
) -> GraphBuilder:
    """lookup_table_v2 (op 1) of `table` [vocab, width] at the feed ids [-1]; fetches `rows`."""
    g = GraphBuilder()
    g.feed("ids", ids, [-1])
    g.param("w", table)
    g.node(
        "lookup_table_v2",
        {"W": ["w"], "Ids": ["ids"]},
        {"Out": [V("rows", [-1, table.shape[1]])]},
        {"padding_idx": padding_idx},
    )
    g.fetch("rows")
    return g


def arange_of_feed() -> GraphBuilder:
    """arange(0, n) (range: op 2) of the int64 feed n [1]: its length is the value of the feed,
    a size read from input data; fetches `o`."""
    g = GraphBuilder()
    g.feed("n", DType.INT64, [1])
    fill = {"shape": [1], "dtype": int(DType.INT64)}
    g.node("fill_constant", {}, {"Out": [V("zero", [1], DType.INT64)]}, {**fill, "value": 0.0})
    g.node("fill_constant", {}, {"Out": [V("one", [1], DType.INT64)]}, {**fill, "value": 1.0})
    g.node(
        "range",
        {"Start": ["zero"], "End": ["n"], "Step": ["one"]},
        {"Out": [V("o", [-1], DType.INT64)]},
    )
    g.fetch("o")
    return g


def conv(channels: int = 3, filters: int = 8, size: int = 16, *, batch: int = -1) -> GraphBuilder:
    """conv2d 3x3 (pad 1) + per-channel bias + relu + 2x2 max pool; fetches `pool`."""
    g = GraphBuilder()
    x = g.feed("image", FP32, [batch, channels, size, size])
    w = g.param("conv.w", weights(filters, channels, 3, 3))
    b = g.param("conv.b", weights(filters))
    full, half = [batch, filters, size, size], [batch, filters, size // 2, size // 2]
    g.node("conv2d", {"Input": [x], "Filter": [w]}, {"Output": [V("conv", full)]}, CONV2D_ATTRS)
    g.node("elementwise_add", {"X": ["conv"], "Y": [b]}, {"Out": [V("biased", full)]}, {"axis": 1})
    g.node("relu", {"X": ["biased"]}, {"Out": [V("act", full)]})
    g.node("pool2d", {"X": ["act"]}, {"Out": [V("pool", half)]}, POOL2D_ATTRS)
    g.fetch("pool")
    return g


def matmul_chain(links: int) -> GraphBuilder:
    """h = x @ x @ x ... (`links` matmuls) over x[-1, -1]: cost grows with n^3 per link."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, -1])
    h = x
    for i in range(links):
        out = V(f"h{i}", [-1, -1])
        g.node(
            "matmul_v2", {"X": [h], "Y": [x]}, {"Out": [out]}, {"trans_x": False, "trans_y": False}
        )
        h = out.name
    g.fetch(h)
    return g


def large_program(ops: int) -> Built:
    """A chain of `ops` relu ops over x[-1, 16]: a program of a few thousand ops to check."""
    g = GraphBuilder()
    h = g.feed("x", FP32, [-1, 16])
    for i in range(ops):
        out = V(f"h{i}", [-1, 16])
        g.node("relu", {"X": [h]}, {"Out": [out]})
        h = out.name
    g.fetch(h)
    return g.built()


# Attributes as Paddle 3.3.1 writes them into a saved inference program (bookkeeping ones aside).
CONV2D_ATTRS: Final[Mapping[str, Any]] = {
    "strides": [1, 1],
    "paddings": [1, 1],
    "padding_algorithm": "EXPLICIT",
    "groups": 1,
    "dilations": [1, 1],
    "data_format": "NCHW",
}
POOL2D_ATTRS: Final[Mapping[str, Any]] = {
    "pooling_type": "max",
    "ksize": [2, 2],
    "global_pooling": False,
    "strides": [2, 2],
    "paddings": [0, 0],
    "exclusive": True,
    "adaptive": False,
    "ceil_mode": False,
    "data_format": "NCHW",
    "padding_algorithm": "EXPLICIT",
    "use_cudnn": True,
}
# What Paddle attaches to every op; validate() must drop these.
BOOKKEEPING_ATTRS: Final[Mapping[str, Any]] = {
    "op_role": 0,
    "op_role_var": Attr(pb.STRINGS, []),
    "op_namescope": "/",
    "op_callstack": ['  File "/home/someone/secret/export.py", line 12, in <module>'],
    "op_device": "",
    "with_quant_attr": False,
}
