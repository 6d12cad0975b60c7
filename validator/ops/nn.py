"""Convolutions (NCHW and NHWC) and the window geometry they share with pooling."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np

from graph_proto.types import FLOATS, UNKNOWN, Shape
from validator.diagnostics import Code
from validator.ops._batch import batch_at
from validator.ops._cases import f32
from validator.ops._def import (
    AttrError,
    Case,
    EmptyDimError,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)
from validator.ops._shape import merge_dim, require_rank, window_out

# NOTE: fluid 1.x wrote data_format="AnyLayout" by default; Paddle reads anything but NHWC as NCHW.
FORMATS: Final = ("NCHW", "NHWC", "AnyLayout")
ALGORITHMS: Final = ("EXPLICIT", "SAME", "VALID")
BACKEND_FLAGS: Final = frozenset(
    {"use_cudnn", "use_mkldnn", "use_quantizer", "mkldnn_data_type", "is_test"}
    | {"workspace_size_MB", "exhaustive_search"}
)

Pads = tuple[tuple[int, int], ...]


class PaddedWindow(Protocol):
    """The attrs resolve_pads reads: conv and pool2d attrs both have them."""

    @property
    def paddings(self) -> tuple[int, ...]: ...

    @property
    def padding_algorithm(self) -> str: ...


@dataclass(frozen=True, slots=True)
class ConvAttrs:
    strides: tuple[int, ...] = (1, 1)
    paddings: tuple[int, ...] = (0, 0)
    padding_algorithm: str = "EXPLICIT"
    dilations: tuple[int, ...] = (1, 1)
    groups: int = 1
    data_format: str = "NCHW"


@dataclass(frozen=True, slots=True)
class ConvTransposeAttrs(ConvAttrs):
    output_padding: tuple[int, ...] = ()
    output_size: tuple[int, ...] = ()


def channel_last(value: str, name: str, allowed: tuple[str, ...] = FORMATS) -> bool:
    if value not in allowed:
        raise AttrError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value == "NHWC"


def layout(shape: Shape, last: bool) -> tuple[int, int, Shape]:
    """(batch, channels, spatial dims) of a channel-first or channel-last shape."""
    return (shape[0], shape[-1], shape[1:-1]) if last else (shape[0], shape[1], shape[2:])


def compose(n: int, c: int, spatial: Shape, last: bool) -> Shape:
    return (n, *spatial, c) if last else (n, c, *spatial)


def pair(values: tuple[int, ...], name: str) -> tuple[int, int]:
    if len(values) != 2:
        raise AttrError(f"{name}: expected 2 values, got {list(values)}")
    if min(values) < 1:
        raise AttrError(f"{name} must be >= 1, got {list(values)}")
    return values[0], values[1]


def resolve_pads(a: PaddedWindow, sizes: Shape, strides: Shape, kernel: Shape) -> Pads:
    """(before, after) padding per spatial axis, as Paddle's UpdatePadding(AndDilation) makes it."""
    if a.padding_algorithm not in ALGORITHMS:
        raise AttrError(
            f"padding_algorithm must be one of {list(ALGORITHMS)}, got {a.padding_algorithm!r}"
        )
    p = a.paddings
    if len(p) not in (2, 4):
        raise AttrError(f"paddings: expected 2 or 4 values, got {list(p)}")
    if min(p) < 0:
        raise AttrError(f"paddings must be >= 0, got {list(p)}")
    if a.padding_algorithm == "VALID":
        return ((0, 0), (0, 0))
    if a.padding_algorithm == "EXPLICIT":
        return ((p[0], p[0]), (p[1], p[1])) if len(p) == 2 else ((p[0], p[1]), (p[2], p[3]))
    return tuple(_same_pad(*args) for args in zip(sizes, strides, kernel, strict=True))


def _same_pad(size: int, stride: int, kernel: int) -> tuple[int, int]:
    """SAME: output ceil(size / stride), the padding split with the odd one after."""
    if size < 0 or kernel < 0:
        return (0, 0)  # the output dim is unknown anyway
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


@dataclass(frozen=True, slots=True)
class _Window:
    last: bool
    n: int
    c: int
    sizes: Shape
    kernel: Shape
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: Pads


def _conv_window(x: TensorType, w: TensorType, a: ConvAttrs) -> _Window:
    """Checks what conv2d and conv2d_transpose share and resolves their window geometry."""
    require_rank(x, (4,), "Input")
    require_rank(w, (4,), "Filter")
    last = channel_last(a.data_format, "data_format")
    n, c, sizes = layout(x.shape, last)
    strides = pair(a.strides, "strides")
    dilations = pair(a.dilations, "dilations")
    if a.groups < 1:
        raise AttrError(f"groups must be >= 1, got {a.groups}")
    if 0 in (n, c) or 0 in w.shape:
        raise EmptyDimError(
            f"expected non-empty batch, channels and Filter, got Input {list(x.shape)} and Filter {list(w.shape)}"
        )
    if c >= 0 and c % a.groups:
        raise ShapeError(f"expected input channels divisible by groups {a.groups}, got {c}")
    kernel = w.shape[2:]
    pads = resolve_pads(a, sizes, strides, kernel)
    if a.padding_algorithm == "SAME":
        dilations = (1, 1)  # NOTE: Paddle drops the dilations under SAME padding
    return _Window(last, n, c, sizes, kernel, strides, dilations, pads)


def _require_depthwise(x: TensorType, a: ConvAttrs) -> None:
    """Runs after the conv rule, which checked the rank and data_format."""
    c = x.shape[-1] if a.data_format == "NHWC" else x.shape[1]
    if c >= 0 and a.groups != c:
        raise ShapeError(f"expected groups equal to the input channels ({c}), got {a.groups}")


def _conv2d_infer(x: TensorType, w: TensorType, a: ConvAttrs) -> Shape:
    g = _conv_window(x, w, a)
    out_c, in_c = w.shape[0], w.shape[1]
    if g.c >= 0 and in_c >= 0 and g.c != in_c * a.groups:
        raise ShapeError(
            f"expected input channels = Filter dim 1 * groups = {in_c * a.groups}, got {g.c} (Input {list(x.shape)}, {a.data_format})"
        )
    if out_c >= 0 and out_c % a.groups:
        raise ShapeError(f"expected Filter dim 0 divisible by groups {a.groups}, got {out_c}")
    spatial = tuple(
        UNKNOWN if size < 0 or k < 0 else window_out(size, k, s, p[0] + p[1], d)
        for size, k, s, p, d in zip(g.sizes, g.kernel, g.strides, g.pads, g.dilations, strict=True)
    )
    return compose(g.n, out_c, spatial, g.last)


def _depthwise_conv2d_infer(x: TensorType, w: TensorType, a: ConvAttrs) -> Shape:
    out = _conv2d_infer(x, w, a)
    _require_depthwise(x, a)
    return out


def _conv2d_cost(_x: TensorType, w: TensorType, outputs: list[TensorType], _a: ConvAttrs) -> int:
    # 2 FLOPs per multiply-accumulate; each output element reads Filter dims 1..3.
    return 2 * outputs[0].numel() * TensorType(w.dtype, w.shape[1:]).numel()


def _transpose_extras(a: ConvTransposeAttrs, g: _Window) -> None:
    if a.output_size and a.output_padding:
        raise AttrError(
            f"expected output_size or output_padding, got both ({list(a.output_size)} and {list(a.output_padding)})"
        )
    if a.output_size:
        pair(a.output_size, "output_size")
    if a.output_padding:
        if len(a.output_padding) != 2:
            raise AttrError(f"output_padding: expected 2 values, got {list(a.output_padding)}")
        for op, s, d in zip(a.output_padding, g.strides, g.dilations, strict=True):
            if not 0 <= op < max(s, d):
                raise AttrError(
                    f"output_padding must be in [0, max(stride, dilation)) = [0, {max(s, d)}), got {op}"
                )


def _transpose_dim(g: _Window, axis: int, a: ConvTransposeAttrs) -> int:
    size, k, s, d = g.sizes[axis], g.kernel[axis], g.strides[axis], g.dilations[axis]
    p0, p1 = g.pads[axis]
    base = UNKNOWN
    if size >= 0 and k >= 0:
        base = (size - 1) * s - p0 - p1 + d * (k - 1) + 1
        if base <= 0:
            raise ShapeError(
                f"expected a positive output size, got {base} from input {size}, kernel {k}, stride {s}, dilation {d}, padding {[p0, p1]}"
            )
    if a.output_size:
        target = a.output_size[axis]
        if base >= 0 and not base <= target < base + s:
            raise ShapeError(f"output_size: expected a value in [{base}, {base + s}), got {target}")
        return target
    # NOTE: Paddle's compile-time rule adds output_padding to an unknown (-1) size and records
    # e.g. 0; the size is unknown, so -1 it stays here.
    return base + a.output_padding[axis] if a.output_padding and base >= 0 else base


def _conv2d_transpose_infer(
    x: TensorType, w: TensorType, bias: TensorType | None, a: ConvTransposeAttrs
) -> Shape:
    if bias is not None:
        raise ShapeError(
            f"expected no Bias (only Paddle's oneDNN kernels read it), got {list(bias.shape)}"
        )
    g = _conv_window(x, w, a)
    merge_dim(g.c, w.shape[0], "input channels and Filter dim 0")
    _transpose_extras(a, g)
    out_c = w.shape[1] * a.groups if w.shape[1] >= 0 else UNKNOWN
    return compose(g.n, out_c, tuple(_transpose_dim(g, i, a) for i in range(2)), g.last)


def _depthwise_conv2d_transpose_infer(
    x: TensorType, w: TensorType, bias: TensorType | None, a: ConvTransposeAttrs
) -> Shape:
    out = _conv2d_transpose_infer(x, w, bias, a)
    _require_depthwise(x, a)
    return out


def _conv2d_transpose_cost(
    x: TensorType, w: TensorType, _b: TensorType | None, _o: list[TensorType], _a: ConvAttrs
) -> int:
    # Each input element scatters into Filter dims 1..3 outputs.
    return 2 * x.numel() * TensorType(w.dtype, w.shape[1:]).numel()


# numpy references (NCHW inside; NHWC is transposed in and out) ---------------------------------


def to_nchw(x: np.ndarray, last: bool) -> np.ndarray:
    return x.transpose(0, 3, 1, 2) if last else x


def from_nchw(y: np.ndarray, last: bool, like: np.ndarray) -> np.ndarray:
    return (y.transpose(0, 2, 3, 1) if last else y).astype(like.dtype)


def _taps(start: int, stride: int, count: int) -> slice:
    """The `count` positions a kernel tap visits, `stride` apart."""
    return slice(start, start + stride * (count - 1) + 1, stride)


def _conv2d_ref(x: np.ndarray, w: np.ndarray, a: ConvAttrs) -> np.ndarray:
    last, g = a.data_format == "NHWC", a.groups
    xs = to_nchw(x, last)
    pads = resolve_pads(a, xs.shape[2:], a.strides, w.shape[2:])
    (sh, sw), (dh, dw) = a.strides, (1, 1) if a.padding_algorithm == "SAME" else a.dilations
    xp = np.pad(xs, ((0, 0), (0, 0), *pads)).astype(np.float64)
    n, _, h, wd = xp.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    xg, wg = xp.reshape(n, g, cg, h, wd), w.reshape(g, o // g, cg, kh, kw)
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xg[..., _taps(i * dh, sh, oh), _taps(j * dw, sw, ow)]
            out += np.einsum("ngchw,goc->ngohw", patch, wg[..., i, j]).reshape(n, o, oh, ow)
    return from_nchw(out, last, x)


def _conv2d_transpose_ref(
    x: np.ndarray, w: np.ndarray, _b: np.ndarray | None, a: ConvTransposeAttrs
) -> np.ndarray:
    last, g = a.data_format == "NHWC", a.groups
    xs = to_nchw(x, last).astype(np.float64)
    n, c, h, wd = xs.shape
    _, og, kh, kw = w.shape
    (pt, pb), (pl, pr) = resolve_pads(a, (h, wd), a.strides, (kh, kw))
    (sh, sw), (dh, dw) = a.strides, (1, 1) if a.padding_algorithm == "SAME" else a.dilations
    full = np.zeros(
        (n, g * og, (h - 1) * sh + dh * (kh - 1) + 1, (wd - 1) * sw + dw * (kw - 1) + 1)
    )
    xg, wg = xs.reshape(n, g, c // g, h, wd), w.reshape(g, c // g, og, kh, kw)
    for i in range(kh):
        for j in range(kw):
            part = np.einsum("ngchw,gco->ngohw", xg, wg[..., i, j]).reshape(n, g * og, h, wd)
            full[..., _taps(i * dh, sh, h), _taps(j * dw, sw, wd)] += part
    extra = a.output_padding or (0, 0)
    oh, ow = a.output_size or (
        full.shape[2] - pt - pb + extra[0],
        full.shape[3] - pl - pr + extra[1],
    )
    out = np.zeros((n, g * og, oh, ow))
    crop = full[:, :, pt : pt + oh, pl : pl + ow]
    out[:, :, : crop.shape[2], : crop.shape[3]] = crop
    return from_nchw(out, last, x)


def case(
    inputs: dict[str, np.ndarray],
    ref: Callable[..., np.ndarray],
    raises: str,
    code: Code | None,
    attrs: dict[str, object],
) -> Case:
    if raises:
        return Case(inputs, attrs, raises=raises, code=code)
    return Case(inputs, attrs, expect=ref)


def _cv(x: Shape, w: Shape, raises: str = "", code: Code | None = None, **attrs: object) -> Case:
    """A conv2d case: inputs by shape; valid (checked against the reference) unless `raises`."""
    return case({"Input": f32(*x), "Filter": f32(*w)}, _conv2d_ref, raises, code, attrs)


def _ct(x: Shape, w: Shape, raises: str = "", code: Code | None = None, **attrs: object) -> Case:
    return case({"Input": f32(*x), "Filter": f32(*w)}, _conv2d_transpose_ref, raises, code, attrs)


# fmt: off
_CONV2D_CASES: Final = (
    _cv((2, 3, 7, 7), (4, 3, 3, 3), paddings=[1, 1]),
    _cv((1, 1, 3, 3), (1, 1, 3, 3)),
    _cv((1, 6, 5, 4), (6, 2, 3, 3), groups=2, data_format="NHWC", strides=[2, 1],
        paddings=[1, 0, 0, 1], dilations=[2, 1]),
    _cv((1, 2, 7, 8), (4, 2, 3, 3), padding_algorithm="SAME", strides=[2, 2], dilations=[2, 2]),
    _cv((1, 2, 5, 5), (2, 2, 2, 2), padding_algorithm="VALID", paddings=[3, 3]),
    _cv((1, 4, 5, 5), (4, 2, 3, 3), data_format="AnyLayout", groups=2),
    _cv((1, 3, 5, 5), (4, 2, 3, 3), "expected input channels = Filter dim 1 * groups = 2, got 3", Code.SHAPE_MISMATCH),
    _cv((1, 4, 5, 5), (3, 2, 3, 3), "expected Filter dim 0 divisible by groups 2, got 3", Code.SHAPE_MISMATCH, groups=2),
    _cv((1, 3, 5, 5), (4, 1, 3, 3), "expected input channels divisible by groups 2", Code.SHAPE_MISMATCH, groups=2),
    _cv((1, 2, 5, 5), (2, 2, 3, 3), "groups must be >= 1, got 0", Code.ATTR_VALUE, groups=0),
    _cv((1, 1, 5, 5), (1, 1, 3, 3), "strides must be >= 1, got [0, 1]", Code.ATTR_VALUE, strides=[0, 1]),
    _cv((1, 1, 5, 5), (1, 1, 3, 3), "dilations: expected 2 values, got [1]", Code.ATTR_VALUE, dilations=[1]),
    _cv((1, 1, 2, 2), (1, 1, 3, 3), "does not fit an input of 2 with padding 0", Code.SHAPE_MISMATCH),
    _cv((1, 3, 5), (1, 3, 3), "Input: expected rank [4], got 3", Code.AXIS_INVALID),
    _cv((1, 1, 5, 5), (1, 1, 3, 3), "expected 2 or 4 values, got [1, 1, 1]", Code.ATTR_VALUE, paddings=[1, 1, 1]),
    _cv((1, 1, 5, 5), (1, 1, 3, 3), "paddings must be >= 0, got [-1, 0]", Code.ATTR_VALUE, paddings=[-1, 0]),
    _cv((1, 1, 5, 5), (1, 1, 3, 3), "padding_algorithm must be one of", Code.ATTR_VALUE, padding_algorithm="FULL"),
    _cv((1, 1, 5, 5), (1, 1, 3, 3), "got 'NCDHW'", Code.ATTR_VALUE, data_format="NCDHW"),
    _cv((1, 0, 3, 3), (1, 0, 1, 1), "expected non-empty batch, channels and Filter", Code.EMPTY_DIM),
    # lowering variants
    _cv((1, 2, 7, 7), (3, 2, 1, 1), padding_algorithm="SAME", strides=[3, 3]),
    Case({"Input": f32(1, 2, 5, 5).astype(np.float16), "Filter": f32(3, 2, 3, 3).astype(np.float16)},
         {"paddings": [1, 0, 0, 1]}, expect=_conv2d_ref, rtol=1e-2, atol=1e-2),
)
# fmt: on

CONV2D = OpDef(
    op_type="conv2d",
    doc="2-D convolution of Input [N, C, H, W] (or NHWC) with Filter [O, C/groups, kh, kw]; no bias.",
    inputs=(In("Input"), In("Filter")),
    outputs=(Out("Output"),),
    types={"T": FLOATS},
    attrs=ConvAttrs,
    ignored_attrs=BACKEND_FLAGS,
    infer=_conv2d_infer,
    batch=batch_at("Input"),
    cost=_conv2d_cost,
    cases=_CONV2D_CASES,
)

# fmt: off
_DEPTHWISE_CONV2D_CASES: Final = (
    _cv((1, 4, 6, 6), (8, 1, 3, 3), groups=4, strides=[2, 2], paddings=[1, 1]),
    _cv((1, 5, 6, 3), (6, 1, 3, 3), groups=3, data_format="NHWC", padding_algorithm="SAME"),
    _cv((1, 4, 6, 6), (4, 2, 3, 3), "expected groups equal to the input channels (4), got 2", Code.SHAPE_MISMATCH, groups=2),
    _cv((), (4, 1, 3, 3), "Input: expected rank [4], got 0", Code.AXIS_INVALID, groups=4),
)
# fmt: on

DEPTHWISE_CONV2D = OpDef(
    op_type="depthwise_conv2d",
    doc="conv2d with groups equal to the input channels (Paddle's choice when groups == C).",
    inputs=(In("Input"), In("Filter")),
    outputs=(Out("Output"),),
    types={"T": FLOATS},
    attrs=ConvAttrs,
    ignored_attrs=BACKEND_FLAGS,
    infer=_depthwise_conv2d_infer,
    batch=batch_at("Input"),
    cost=_conv2d_cost,
    cases=_DEPTHWISE_CONV2D_CASES,
)

# fmt: off
_CONV2D_TRANSPOSE_CASES: Final = (
    _ct((1, 3, 4, 4), (3, 2, 3, 3), strides=[2, 2], paddings=[1, 1]),
    _ct((1, 3, 4, 4), (3, 2, 3, 3), strides=[2, 2], paddings=[1, 1], output_padding=[1, 0]),
    _ct((2, 3, 4, 4), (3, 2, 3, 3), strides=[2, 2], paddings=[1, 1], output_size=[8, 7]),
    _ct((1, 4, 4, 6), (6, 1, 3, 3), groups=3, data_format="NHWC", padding_algorithm="SAME",
        strides=[2, 2]),
    _ct((1, 2, 3, 3), (2, 2, 2, 2), paddings=[0, 1, 1, 0], dilations=[2, 1]),
    _ct((1, 3, 5, 5), (3, 4, 3, 3), strides=[3, 3], output_size=[17, 16]),
    _ct((1, 3, 5, 5), (3, 4, 3, 3), strides=[2, 2], paddings=[1, 0, 0, 2], output_size=[11, 10]),
    _ct((1, 5, 4, 4), (4, 2, 3, 3), groups=2, data_format="NHWC", strides=[3, 3], paddings=[0, 1, 2, 0],
        output_padding=[2, 2]),
    _ct((1, 3, 5, 4), (3, 4, 2, 2), strides=[3, 3], padding_algorithm="SAME"),
    _ct((1, 3, 4, 4), (3, 2, 3, 3), "output_size: expected a value in [7, 9), got 9", Code.SHAPE_MISMATCH,
        strides=[2, 2], paddings=[1, 1], output_size=[9, 9]),
    _ct((1, 3, 4, 4), (3, 2, 3, 3), "output_padding must be in [0, max(stride, dilation)) = [0, 2), got 2", Code.ATTR_VALUE,
        strides=[2, 2], output_padding=[2, 0]),
    _ct((1, 3, 4, 4), (3, 2, 3, 3), "expected output_size or output_padding, got both", Code.ATTR_VALUE,
        output_size=[6, 6], output_padding=[0, 0]),
    _ct((1, 3, 4, 4), (2, 2, 3, 3), "input channels and Filter dim 0: expected equal sizes, got 3 and 2", Code.SHAPE_MISMATCH),
    _ct((1, 1, 1, 1), (1, 1, 1, 1), "expected a positive output size, got -1", Code.SHAPE_MISMATCH, paddings=[1, 1]),
    _ct((1, 3, 4, 4), (3, 2, 3, 3), "expected input channels divisible by groups 2, got 3", Code.SHAPE_MISMATCH, groups=2),
    Case(
        {"Input": f32(1, 3, 4, 4), "Filter": f32(3, 2, 3, 3), "Bias": f32(2)},
        raises="expected no Bias (only Paddle's oneDNN kernels read it), got [2]", code=Code.SHAPE_MISMATCH,
    ),
)
# fmt: on

CONV2D_TRANSPOSE = OpDef(
    op_type="conv2d_transpose",
    doc="Transposed 2-D convolution with Filter [C, O/groups, kh, kw]; no bias.",
    inputs=(In("Input"), In("Filter"), In("Bias", optional=True)),
    outputs=(Out("Output"),),
    types={"T": FLOATS},
    attrs=ConvTransposeAttrs,
    ignored_attrs=BACKEND_FLAGS,
    infer=_conv2d_transpose_infer,
    batch=batch_at("Input"),
    cost=_conv2d_transpose_cost,
    cases=_CONV2D_TRANSPOSE_CASES,
)

# fmt: off
_DEPTHWISE_CONV2D_TRANSPOSE_CASES: Final = (
    _ct((1, 4, 3, 3), (4, 1, 3, 3), groups=4, strides=[2, 2]),
    _ct((1, 4, 3, 3), (4, 1, 3, 3), "expected groups equal to the input channels (4), got 2", Code.SHAPE_MISMATCH, groups=2),
    _ct((4,), (4, 1, 3, 3), "Input: expected rank [4], got 1", Code.AXIS_INVALID, groups=4),
)
# fmt: on

DEPTHWISE_CONV2D_TRANSPOSE = OpDef(
    op_type="depthwise_conv2d_transpose",
    doc="conv2d_transpose with groups equal to the input channels (Paddle's choice when groups == C).",
    inputs=(In("Input"), In("Filter"), In("Bias", optional=True)),
    outputs=(Out("Output"),),
    types={"T": FLOATS},
    attrs=ConvTransposeAttrs,
    ignored_attrs=BACKEND_FLAGS,
    infer=_depthwise_conv2d_transpose_infer,
    batch=batch_at("Input"),
    cost=_conv2d_transpose_cost,
    cases=_DEPTHWISE_CONV2D_TRANSPOSE_CASES,
)

OPS = (CONV2D, DEPTHWISE_CONV2D, CONV2D_TRANSPOSE, DEPTHWISE_CONV2D_TRANSPOSE)
