"""Matrix products: matmul_v2 (numpy rules), legacy matmul and mul (fc)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto.types import FLOATS, INDICES, Shape
from validator.diagnostics import Code
from validator.ops._batch import aligned
from validator.ops._cases import f32, i32, i64
from validator.ops._def import (
    AttrError,
    AxisError,
    BatchView,
    Case,
    Couples,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)
from validator.ops._shape import broadcast, merge_dim, product

MKLDNN_ATTRS: Final = frozenset({"use_mkldnn", "mkldnn_data_type", "use_quantizer"})


def _matrix_cost(inner: int, outputs: list[TensorType]) -> int:
    """2*M*N*K*batch: a multiply and an add per output element and inner index."""
    return 2 * outputs[0].numel() * max(inner, 1)


def _require_matrix_operands(x: TensorType, y: TensorType) -> None:
    if x.rank == 0 or y.rank == 0:
        raise AxisError(
            f"expected X and Y of rank >= 1, got dims {list(x.shape)} and {list(y.shape)}"
        )


def _as_matrix(dims: Shape, vector: Shape, transpose: bool) -> Shape:
    """The last two dims as used by the product: a 1-D operand becomes `vector`."""
    if len(dims) == 1:
        return vector
    return (*dims[:-2], dims[-1], dims[-2]) if transpose else dims


# --- matmul_v2 ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MatmulV2Attrs:
    trans_x: bool = False
    trans_y: bool = False


def _matmul_v2_infer(x: TensorType, y: TensorType, a: MatmulV2Attrs) -> Shape:
    _require_matrix_operands(x, y)
    # NOTE: a 1-D X is a row [1, K] and a 1-D Y a column [K, 1]; trans_* is ignored for them.
    xm = _as_matrix(x.shape, (1, x.shape[0]), a.trans_x)
    ym = _as_matrix(y.shape, (y.shape[0], 1), a.trans_y)
    merge_dim(xm[-1], ym[-2], "inner dimensions of X and Y")
    # NOTE: Paddle's compile-time MatmulInferMeta takes the batch dims of the higher-rank
    # operand as they are (and max() for equal ranks); its kernel broadcasts like numpy, so
    # we do (X [-1, 1, 3, 4] times Y [7, 4, 5] records [-1, 1, 3, 5]; it runs as [-1, 7, 3, 5]).
    batch = broadcast(xm[:-2], ym[:-2])
    rows = () if x.rank == 1 else (xm[-2],)
    cols = () if y.rank == 1 else (ym[-1],)
    return (*batch, *rows, *cols)


def _matmul_v2_cost(x: TensorType, y: TensorType, outputs: list[TensorType], a: Any) -> int:
    inner = x.shape[0] if x.rank == 1 else x.shape[-2 if a.trans_x else -1]
    if inner < 0:
        inner = y.shape[0] if y.rank == 1 else y.shape[-1 if a.trans_y else -2]
    return _matrix_cost(inner, outputs)


def _matmul_v2_ref(x: np.ndarray, y: np.ndarray, a: MatmulV2Attrs) -> np.ndarray:
    if a.trans_x and x.ndim > 1:
        x = np.swapaxes(x, -1, -2)
    if a.trans_y and y.ndim > 1:
        y = np.swapaxes(y, -1, -2)
    return np.asarray(np.matmul(x, y))


def _matrix_role(rank: int, axis: int, trans: bool, left: bool) -> str:
    """What the batch axis is to one operand: a broadcast batch dim, its free (row or column)
    dim, or its inner (contracted) dim. A 1-D operand is a vector: its one dim is inner."""
    if rank == 1:
        return "inner"
    if axis < rank - 2:
        return "batch"
    free = rank - 2 if left != trans else rank - 1
    return "free" if axis == free else "inner"


def matrix_batch(view: BatchView, trans_x: bool, trans_y: bool) -> int:
    """Rows stay apart when the batch is a broadcast batch dim of the operands, or the free dim
    of exactly one of them; contracting over it couples them."""
    x, y = view.type("X").rank, view.type("Y").rank
    out = next(iter(view.types_out.values()))[0].rank
    roles = {
        slot: _matrix_role(rank, axis, trans, slot == "X")
        for slot, rank, axis, trans in (
            ("X", x, view.axis("X"), trans_x),
            ("Y", y, view.axis("Y"), trans_y),
        )
        if axis is not None
    }
    if "inner" in roles.values():
        raise Couples("contracts over the batch dimension")
    if "free" in roles.values():
        if len(roles) > 1:
            raise Couples("multiplies batched X by batched Y: every row meets every other row")
        return out - 1 if "Y" in roles else out - (2 if y > 1 else 1)
    batch_dims = out - (x > 1) - (y > 1)
    return aligned(view, {"X": [batch_dims - (x - 2)], "Y": [batch_dims - (y - 2)]})


def _matmul_v2_batch(view: BatchView) -> int:
    return matrix_batch(view, view.attrs.trans_x, view.attrs.trans_y)


MATMUL_V2 = OpDef(
    op_type="matmul_v2",
    doc="Matrix product of X and Y (optionally transposed) with numpy's rules: batch dims "
    "broadcast, a 1-D operand is a vector whose dim is dropped from the result.",
    inputs=(In("X"), In("Y")),
    outputs=(Out("Out"),),
    types={"T": FLOATS | INDICES},
    attrs=MatmulV2Attrs,
    ignored_attrs=MKLDNN_ATTRS,
    infer=_matmul_v2_infer,
    batch=_matmul_v2_batch,
    cost=_matmul_v2_cost,
    cases=(
        Case({"X": f32(2, 3, 4), "Y": f32(4, 5)}, expect=_matmul_v2_ref),
        Case(
            {"X": f32(2, 4, 3), "Y": f32(5, 4)},
            {"trans_x": True, "trans_y": True},
            expect=_matmul_v2_ref,
        ),
        Case({"X": f32(2, 1, 3, 4), "Y": f32(7, 4, 5)}, expect=_matmul_v2_ref),
        Case({"X": f32(4), "Y": f32(2, 4, 5)}, {"trans_x": True}, expect=_matmul_v2_ref),
        Case({"X": f32(2, 3, 4), "Y": f32(4)}, {"trans_y": True}, expect=_matmul_v2_ref),
        Case({"X": f32(4), "Y": f32(4)}, expect=_matmul_v2_ref),
        Case({"X": i64(3, 4), "Y": i64(4, 2)}, expect=_matmul_v2_ref),
        Case({"X": f32(3, 1, 4, 2), "Y": f32(5, 4, 6)}, {"trans_x": True}, expect=_matmul_v2_ref),
        Case({"X": f32(4), "Y": f32(2, 5, 4)}, {"trans_y": True}, expect=_matmul_v2_ref),
        # NOTE: onnxruntime 1.31's Transpose+MatMul fusion got this one wrong (a 1-D Y).
        Case({"X": f32(2, 4, 3), "Y": f32(4)}, {"trans_x": True}, expect=_matmul_v2_ref),
        Case({"X": i32(2, 3, 4), "Y": i32(2, 4, 3)}, expect=_matmul_v2_ref),
        Case({"X": f32(2, 3).astype("f8"), "Y": f32(3, 2).astype("f8")}, expect=_matmul_v2_ref),
        Case(
            {"X": f32(2, 3, 4).astype("f2"), "Y": f32(4, 5).astype("f2")},
            expect=lambda x, y, a: (x.astype("f4") @ y.astype("f4")).astype("f2"),
            rtol=1e-3,
            atol=1e-3,
        ),
        Case({"X": f32(3, 0), "Y": f32(0, 2)}, expect=_matmul_v2_ref),
        Case(
            {"X": f32(3, 4), "Y": f32(5, 6)},
            raises="inner dimensions of X and Y: expected equal sizes, got 4 and 5",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(3, 4), "Y": f32(3, 4)},
            {"trans_y": False},
            raises="got 4 and 3",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3, 4), "Y": f32(3, 4, 5)},
            raises="expected dims that are equal or 1",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(), "Y": f32(4)},
            raises="expected X and Y of rank >= 1, got dims [] and [4]",
            code=Code.AXIS_INVALID,
        ),
    ),
)


# --- matmul (legacy) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MatmulAttrs:
    transpose_X: bool = False  # Paddle's attribute names, verbatim
    transpose_Y: bool = False
    alpha: float = 1.0
    head_number: int = 1
    # MKL-DNN fusions of 2.x programs saved without clip_extra: accepted only when unused.
    fused_reshape_X: tuple[int, ...] = ()
    fused_reshape_Y: tuple[int, ...] = ()
    fused_transpose_X: tuple[int, ...] = ()
    fused_transpose_Y: tuple[int, ...] = ()
    fused_reshape_Out: tuple[int, ...] = ()
    fused_transpose_Out: tuple[int, ...] = ()


def _check_matmul_attrs(x: TensorType, y: TensorType, a: MatmulAttrs) -> None:
    if a.head_number != 1:
        raise AttrError(f"head_number must be 1, got {a.head_number}")
    fused = {
        "fused_reshape_X": a.fused_reshape_X,
        "fused_reshape_Y": a.fused_reshape_Y,
        "fused_transpose_X": a.fused_transpose_X,
        "fused_transpose_Y": a.fused_transpose_Y,
        "fused_reshape_Out": a.fused_reshape_Out,
        "fused_transpose_Out": a.fused_transpose_Out,
    }
    for name, value in fused.items():
        if value:
            raise AttrError(f"{name} must be empty (no MKL-DNN fusion), got {list(value)}")
    # NOTE: Paddle's compile-time shape treats a transposed 1-D X as [K, 1] but its kernel
    # ignores the flag ([4] x [4, 5] records [4, 5] and runs as [5]): refuse the ambiguity.
    for name, flag, t in (("transpose_X", a.transpose_X, x), ("transpose_Y", a.transpose_Y, y)):
        if flag and t.rank == 1:
            raise AttrError(f"{name} must be false for a 1-D operand, got true")


def _matmul_batch(xb: Shape, yb: Shape) -> Shape:
    """Legacy batch dims: no broadcasting; when both operands have them they must be equal."""
    if not xb or not yb:
        return xb or yb
    if len(xb) != len(yb):
        raise ShapeError(f"batch dims of X and Y: expected equal, got {list(xb)} and {list(yb)}")
    return tuple(merge_dim(p, q, "batch dims of X and Y") for p, q in zip(xb, yb, strict=True))


def _matmul_infer(x: TensorType, y: TensorType, a: MatmulAttrs) -> Shape:
    _require_matrix_operands(x, y)
    _check_matmul_attrs(x, y, a)
    xm = _as_matrix(x.shape, (1, x.shape[0]), a.transpose_X)
    ym = _as_matrix(y.shape, (y.shape[0], 1), a.transpose_Y)
    merge_dim(xm[-1], ym[-2], "inner dimensions of X and Y")
    batch = _matmul_batch(xm[:-2], ym[:-2])
    rows = () if x.rank == 1 else (xm[-2],)
    cols = () if y.rank == 1 else (ym[-1],)
    return (*batch, *rows, *cols)


def _matmul_cost(x: TensorType, y: TensorType, outputs: list[TensorType], a: Any) -> int:
    return _matmul_v2_cost(x, y, outputs, MatmulV2Attrs(a.transpose_X, a.transpose_Y))


def _matmul_ref(x: np.ndarray, y: np.ndarray, a: MatmulAttrs) -> np.ndarray:
    out = _matmul_v2_ref(x, y, MatmulV2Attrs(a.transpose_X, a.transpose_Y))
    return np.asarray(out * np.float32(a.alpha), x.dtype)


def _matmul_v1_batch(view: BatchView) -> int:
    return matrix_batch(view, view.attrs.transpose_X, view.attrs.transpose_Y)


MATMUL = OpDef(
    op_type="matmul",
    doc="Legacy matrix product alpha * X @ Y (optionally transposed); batch dims are not "
    "broadcast: they come from the operand that has them, or must be equal.",
    inputs=(In("X"), In("Y")),
    outputs=(Out("Out"),),
    types={"T": FLOATS},
    attrs=MatmulAttrs,
    ignored_attrs=MKLDNN_ATTRS
    | {"Scale_x", "Scale_y", "Scale_out", "force_fp32_output"},  # MKL-DNN int8 only
    infer=_matmul_infer,
    batch=_matmul_v1_batch,
    cost=_matmul_cost,
    cases=(
        Case({"X": f32(2, 3, 4), "Y": f32(4, 5)}, {"alpha": 2.0}, expect=_matmul_ref),
        Case({"X": f32(3, 4), "Y": f32(2, 6, 4, 5)}, expect=_matmul_ref),
        Case(
            {"X": f32(2, 4, 3), "Y": f32(2, 5, 4)},
            {"transpose_X": True, "transpose_Y": True},
            expect=_matmul_ref,
        ),
        Case({"X": f32(4), "Y": f32(4)}, expect=_matmul_ref),
        Case({"X": f32(2, 3, 4), "Y": f32(4)}, expect=_matmul_ref),
        Case({"X": f32(4), "Y": f32(4, 5)}, {"head_number": 1}, expect=_matmul_ref),
        Case(
            {"X": f32(4, 3), "Y": f32(2, 3, 5, 4)},
            {"transpose_X": True, "transpose_Y": True, "alpha": -0.5},
            expect=_matmul_ref,
        ),
        Case(
            {"X": f32(2, 3, 4).astype("f8"), "Y": f32(2, 4, 2).astype("f8")},
            {"alpha": 3.0},
            expect=_matmul_ref,
        ),
        Case(
            {"X": f32(3, 4), "Y": f32(5, 6)},
            raises="inner dimensions of X and Y",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 1, 3, 4), "Y": f32(7, 4, 5)},
            raises="batch dims of X and Y: expected equal, got [2, 1] and [7]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3, 4), "Y": f32(3, 4, 5)},
            raises="batch dims of X and Y",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(4), "Y": f32(4, 5)},
            {"transpose_X": True},
            raises="transpose_X must be false",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(3, 4), "Y": f32(4, 5)},
            {"head_number": 2},
            raises="head_number must be 1",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(3, 4), "Y": f32(4, 5)},
            {"fused_reshape_X": [3, 4]},
            raises="fused_reshape_X",
            code=Code.ATTR_VALUE,
        ),
    ),
)


# --- mul ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MulAttrs:
    x_num_col_dims: int = 1
    y_num_col_dims: int = 1


def _flatten_at(t: TensorType, cols: int, name: str) -> tuple[Shape, Shape]:
    if not 1 <= cols < t.rank:
        raise AxisError(
            f"{name}_num_col_dims must be in [1, {t.rank}) for {name.upper()} of dims "
            f"{list(t.shape)}, got {cols}"
        )
    return t.shape[:cols], t.shape[cols:]


def _mul_infer(x: TensorType, y: TensorType, a: MulAttrs) -> Shape:
    x_rows, x_inner = _flatten_at(x, a.x_num_col_dims, "x")
    y_inner, y_cols = _flatten_at(y, a.y_num_col_dims, "y")
    merge_dim(product(x_inner), product(y_inner), "flattened inner dimensions of X and Y")
    return (*x_rows, *y_cols)


def _mul_cost(x: TensorType, y: TensorType, outputs: list[TensorType], a: MulAttrs) -> int:
    inner = product(x.shape[a.x_num_col_dims :])
    return _matrix_cost(inner if inner >= 0 else product(y.shape[: a.y_num_col_dims]), outputs)


def _mul_ref(x: np.ndarray, y: np.ndarray, a: MulAttrs) -> np.ndarray:
    xs, ys = x.shape, y.shape
    x2 = x.reshape(int(np.prod(xs[: a.x_num_col_dims])), -1)
    y2 = y.reshape(int(np.prod(ys[: a.y_num_col_dims])), -1)
    return np.asarray(x2 @ y2).reshape(*xs[: a.x_num_col_dims], *ys[a.y_num_col_dims :])


def _mul_batch(view: BatchView) -> int:
    """X flattens to [rows, inner] at x_num_col_dims; Y is the (unbatched) weight."""
    if view.axis("Y") is not None:
        raise Couples("multiplies by batched Y: it flattens Y's rows into the contracted dim")
    axis = view.axis("X")
    assert axis is not None
    if axis >= view.attrs.x_num_col_dims:
        raise Couples("folds the batch dimension into the contracted dims")
    return axis


MUL = OpDef(
    op_type="mul",
    doc="fc's product: X flattened to 2-D at x_num_col_dims times Y flattened at "
    "y_num_col_dims; the result keeps X's leading and Y's trailing dims.",
    inputs=(In("X"), In("Y")),
    outputs=(Out("Out"),),
    types={"T": FLOATS},
    attrs=MulAttrs,
    ignored_attrs=MKLDNN_ATTRS | {"scale_x", "scale_y", "scale_out", "force_fp32_output"},
    infer=_mul_infer,
    batch=_mul_batch,
    cost=_mul_cost,
    cases=(
        Case({"X": f32(2, 4), "Y": f32(4, 5)}, expect=_mul_ref),
        Case({"X": f32(2, 3, 4), "Y": f32(4, 5)}, {"x_num_col_dims": 2}, expect=_mul_ref),
        Case({"X": f32(2, 3, 4), "Y": f32(12, 5)}, expect=_mul_ref),
        Case({"X": f32(2, 12), "Y": f32(3, 4, 5, 2)}, {"y_num_col_dims": 2}, expect=_mul_ref),
        Case(
            {"X": f32(2, 3, 2, 2), "Y": f32(2, 2, 3, 2)},
            {"x_num_col_dims": 2, "y_num_col_dims": 2},
            expect=_mul_ref,
        ),
        Case({"X": f32(2, 3), "Y": f32(3, 0)}, expect=_mul_ref),
        Case({"X": f32(2, 4).astype("f8"), "Y": f32(4, 3).astype("f8")}, expect=_mul_ref),
        Case(
            {"X": f32(2, 3, 4), "Y": f32(5, 5)},
            {"x_num_col_dims": 2},
            raises="flattened inner dimensions of X and Y: expected equal sizes, got 4 and 5",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3, 4), "Y": f32(4, 5)},
            {"x_num_col_dims": 3},
            raises="x_num_col_dims must be in [1, 3) for X of dims [2, 3, 4], got 3",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(4), "Y": f32(4, 5)},
            raises="x_num_col_dims must be in [1, 1)",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 4), "Y": f32(4, 5)},
            {"y_num_col_dims": 0},
            raises="y_num_col_dims",
            code=Code.AXIS_INVALID,
        ),
    ),
)

OPS = (MATMUL_V2, MATMUL, MUL)
