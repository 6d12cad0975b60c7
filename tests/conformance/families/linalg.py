"""matmul_v2, legacy matmul and mul built by real Paddle: accepted, with the dims Paddle records.

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_linalg.py has the family's other tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tests.conformance.op_cases import Build, Case, Size, binary
from tests.conformance.paddle_util import (
    install_legacy_compat,
    paddle,
)

install_legacy_compat()  # paddle.matmul only traces to PIR in 3.3.1


def _matmul(transpose_x: bool = False, transpose_y: bool = False, alpha: float = 1.0) -> Any:
    """The legacy matmul op as fluid.layers.matmul wrote it."""

    def fn(x: Any, y: Any) -> Any:
        helper = paddle.base.layer_helper.LayerHelper("matmul")
        out = helper.create_variable_for_type_inference(x.dtype)
        attrs = {"transpose_X": transpose_x, "transpose_Y": transpose_y, "alpha": alpha}
        helper.append_op(type="matmul", inputs={"X": x, "Y": y}, outputs={"Out": out}, attrs=attrs)
        return out

    return fn


def _mul(x_num_col_dims: int, y_num_col_dims: int) -> Any:
    """The legacy mul op (fc's product) with both flattening attributes."""

    def fn(x: Any, y: Any) -> Any:
        helper = paddle.base.layer_helper.LayerHelper("mul")
        out = helper.create_variable_for_type_inference(x.dtype)
        attrs = {"x_num_col_dims": x_num_col_dims, "y_num_col_dims": y_num_col_dims}
        helper.append_op(type="mul", inputs={"X": x, "Y": y}, outputs={"Out": out}, attrs=attrs)
        return out

    return fn


def _layer(make: Callable[[], Any], shape: list[int]) -> Build:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", shape, "float32")
        return [x], [make()(x)]

    return build


def _fc(size: int, num_flatten_dims: int) -> Callable[[], Any]:
    return lambda: lambda x: paddle.static.nn.fc(x, size, num_flatten_dims=num_flatten_dims)


mm: Any = paddle.matmul

# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "matmul_v2_3d_2d": ("matmul_v2", binary(mm, [-1, 3, 4], [4, 5])),
    "matmul_v2_trans_y": ("matmul_v2", binary(lambda x, y: mm(x, y, transpose_y=True), [-1, 3, 4], [5, 4])),
    "matmul_v2_trans_both": ("matmul_v2", binary(lambda x, y: mm(x, y, True, True), [-1, 4, 3], [-1, 5, 4])),
    "matmul_v2_batch": ("matmul_v2", binary(mm, [-1, 2, 3, 4], [-1, 2, 4, -1])),
    "matmul_v2_batch_broadcast": ("matmul_v2", binary(mm, [2, 1, 3, 4], [2, 5, 4, 6])),
    "matmul_v2_batch_dynamic_k": ("matmul_v2", binary(mm, [-1, 3, -1], [-1, -1, 5])),
    "matmul_v2_vector_y": ("matmul_v2", binary(mm, [-1, 3, 4], [4])),
    "matmul_v2_vector_x": ("matmul_v2", binary(mm, [4], [-1, 4, 5])),
    "matmul_v2_vectors": ("matmul_v2", binary(mm, [4], [4])),
    "matmul_3d_2d_alpha": ("matmul", binary(_matmul(alpha=0.5), [-1, 3, 4], [4, 5])),
    "matmul_transposes": ("matmul", binary(_matmul(True, True), [-1, 4, 3], [-1, 5, 4])),
    "matmul_2d_4d": ("matmul", binary(_matmul(), [3, 4], [-1, 2, 4, 5])),
    "matmul_vector_y": ("matmul", binary(_matmul(), [-1, 3, 4], [4])),
    "matmul_vectors": ("matmul", binary(_matmul(), [4], [4])),
    "fc_2d": ("mul", _layer(_fc(5, 1), [-1, 4])),
    "fc_num_flatten_dims_2": ("mul", _layer(_fc(5, 2), [-1, 3, 4])),
    "fc_flattens_trailing_dims": ("mul", _layer(_fc(5, 1), [-1, 3, 4])),
    "linear": ("matmul_v2", _layer(lambda: paddle.nn.Linear(4, 6), [-1, 7, 4])),
    # Lowering variants: transposes with broadcasting, 1-D operands, dtypes, legacy attributes.
    "matmul_v2_trans_x": ("matmul_v2", binary(lambda x, y: mm(x, y, transpose_x=True), [-1, 4, 3], [4, 5])),
    "matmul_v2_2d_4d_trans_y": ("matmul_v2", binary(lambda x, y: mm(x, y, transpose_y=True), [3, 4], [-1, 2, 5, 4])),
    "matmul_v2_vector_x_trans_y": ("matmul_v2", binary(lambda x, y: mm(x, y, transpose_y=True), [4], [-1, 5, 4])),
    "matmul_v2_vector_y_trans_x": ("matmul_v2", binary(lambda x, y: mm(x, y, transpose_x=True), [-1, 4, 3], [4])),
    "matmul_v2_float64": ("matmul_v2", binary(mm, [-1, 3, 4], [-1, 4, 2], "float64")),
    "matmul_alpha_transposes_4d": ("matmul", binary(_matmul(True, True, 2.5), [4, 3], [-1, 2, 5, 4])),
    "matmul_vector_x": ("matmul", binary(_matmul(), [4], [-1, 4, 5])),
    "matmul_batch_equal_alpha": ("matmul", binary(_matmul(alpha=-1.5), [-1, 2, 3, 4], [-1, 2, 4, 5])),
    "mul_both_col_dims": ("mul", binary(_mul(2, 2), [-1, 2, 12], [3, 4, 5])),
    "mul_y_col_dims": ("mul", binary(_mul(1, 2), [-1, 12], [3, 4, 5, 2])),
    "mul_x_col_dims_3": ("mul", binary(_mul(3, 1), [-1, 2, 3, 4], [4, 6])),
}  # fmt: skip


CASES: Final = {
    name: Case(op_type, build, sizes=(Size(1, 4, 1), Size(3, 4, 3)))
    for name, (op_type, build) in PROGRAMS.items()
}
