"""gather, index_select, lookup_table_v2, one_hot_v2 and where built by real Paddle: accepted, with
the dims Paddle records (-1 index counts and batch dims included).

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_index.py has the family's other tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

import numpy as np

from tests.conformance.op_cases import Build, Case, Size, program
from tests.conformance.paddle_util import (
    install_legacy_compat,
    paddle,
)

install_legacy_compat()

F: Any = paddle.nn.functional  # its stubs reject the float scales and tensors Paddle accepts


def embedding_build(shape: list[int], dtype: str, **kwargs: Any) -> Build:
    return program(lambda ids: paddle.nn.Embedding(10, 4, **kwargs)(ids), (shape, dtype))


def _one_hot_depth_tensor(depth: Callable[[], Any]) -> Build:
    """one_hot_v2 with a depth_tensor, appended as Paddle 2.x's F.one_hot(x, tensor) did."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, 3], "int64")
        helper = paddle.base.layer_helper.LayerHelper("one_hot_v2")
        out = helper.create_variable_for_type_inference("float32")
        helper.append_op(
            type="one_hot_v2",
            inputs={"X": [x], "depth_tensor": [depth()]},
            outputs={"Out": [out]},
            attrs={"depth": -1, "dtype": int(paddle.base.core.VarDesc.VarType.FP32)},
        )
        return [x], [out]

    return build


X = ([-1, 5, 6], "float32")
I32 = ([3], "int32")
I64 = ([-1], "int64")

# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "gather": ("gather", program(lambda x, i: paddle.gather(x, i), X, I64)),
    "gather_axis_1": ("gather", program(lambda x, i: paddle.gather(x, i, axis=1), X, I32)),
    "gather_axis_negative": ("gather", program(lambda x, i: paddle.gather(x, i, axis=-1), X, I64)),
    "gather_0d_index": ("gather", program(lambda x, i: paddle.gather(x, i, axis=1), X, ([], "int32"))),
    "gather_2d_index": ("gather", program(lambda x, i: paddle.gather(x, i, axis=2), X, ([-1, 1], "int64"))),
    "gather_int64_x": ("gather", program(lambda x, i: paddle.gather(x, i), ([-1, 3], "int64"), I32)),
    "gather_axis_tensor_0": ("gather", program(lambda x, i: paddle.gather(x, i, axis=paddle.full([1], 0, "int64")), X, I32)),
    "index_select": ("index_select", program(lambda x, i: paddle.index_select(x, i, axis=1), X, I32)),
    "index_select_negative": ("index_select", program(lambda x, i: paddle.index_select(x, i, axis=-1), X, I64)),
    "index_select_default": ("index_select", program(lambda x, i: paddle.index_select(x, i), X, I64)),
    "embedding": ("lookup_table_v2", embedding_build([-1, 7], "int64")),
    "embedding_padding_idx": ("lookup_table_v2", embedding_build([-1, 7], "int64", padding_idx=2)),
    "embedding_negative_padding_idx": ("lookup_table_v2", embedding_build([-1, -1, 1], "int32", padding_idx=-1)),
    "embedding_0d_ids": ("lookup_table_v2", embedding_build([], "int64", padding_idx=0)),
    "one_hot": ("one_hot_v2", program(lambda x: F.one_hot(x, 5), ([-1, 3], "int64"))),
    "one_hot_int32": ("one_hot_v2", program(lambda x: F.one_hot(x, 4), ([-1, -1, 1], "int32"))),
    "one_hot_tensor_classes": ("one_hot_v2", program(lambda x: F.one_hot(x, paddle.full([1], 6, "int32")), ([-1, 3], "int64"))),
    "one_hot_depth_tensor": ("one_hot_v2", _one_hot_depth_tensor(lambda: paddle.full([1], 6, "int32"))),
    "where": ("where", program(paddle.where, ([-1, 3], "bool"), ([-1, 3], "int64"), ([-1, 3], "int64"))),
    "where_broadcast": ("where", program(paddle.where, ([-1, 1, 4], "bool"), ([-1, 3, 1], "float32"), ([4], "float32"))),
    "where_scalar_y": ("where", program(lambda c, x: paddle.where(c, x, 0.0), ([-1, 3], "bool"), ([-1, 3], "float32"))),
}  # fmt: skip


# --- numeric parity: graphgate's lowering against Paddle's Executor ---------------------------


def one_hot_build(dtype: Any, allow_out_of_range: bool) -> Build:
    """one_hot_v2 with a dtype attr and allow_out_of_range, as Paddle 2.x programs carry them."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, 3], "int64")
        helper = paddle.base.layer_helper.LayerHelper("one_hot_v2")
        out = helper.create_variable_for_type_inference(dtype)
        helper.append_op(
            type="one_hot_v2",
            inputs={"X": [x]},
            outputs={"Out": [out]},
            attrs={"depth": 4, "dtype": int(dtype), "allow_out_of_range": allow_out_of_range},
        )
        return [x], [out]

    return build


VT: Any = paddle.base.core.VarDesc.VarType
PARITY_PROGRAMS: dict[str, tuple[str, Build]] = {
    **PROGRAMS,
    "gather_negative_index": ("gather", program(lambda x, i: paddle.gather(x, i, axis=2), X, I64)),
    "index_select_negative_index": ("index_select", program(lambda x, i: paddle.index_select(x, i, axis=1), X, I64)),
    "embedding_float64": ("lookup_table_v2", program(lambda ids: F.embedding(ids, paddle.static.create_parameter([10, 4], "float64"), padding_idx=-2), ([-1, 5], "int64"))),
    "one_hot_int64_dtype": ("one_hot_v2", one_hot_build(VT.INT64, False)),
    "one_hot_bool_allow_out_of_range": ("one_hot_v2", one_hot_build(VT.BOOL, True)),
    "where_float64": ("where", program(paddle.where, ([-1, 2, 3], "bool"), ([-1, 2, 3], "float64"), ([-1, 2, 3], "float64"))),
}  # fmt: skip

# The largest valid index (exclusive) of each program's integer feeds; "batch" (BATCH) for axis 0.
_INT_HIGH: dict[str, int | Literal["batch"]] = {
    "gather": "batch", "gather_int64_x": "batch", "gather_axis_tensor_0": "batch",
    "gather_axis_1": 5, "gather_0d_index": 5, "gather_axis_negative": 6, "gather_2d_index": 6,
    "index_select": 5, "index_select_negative": 6, "index_select_default": "batch",
    "one_hot": 5, "one_hot_int32": 4, "one_hot_tensor_classes": 6, "one_hot_depth_tensor": 6,
    "one_hot_int64_dtype": 4, "one_hot_bool_allow_out_of_range": 4,
}  # fmt: skip
# Feeds set outright: negative indices (they wrap around in Paddle 3 as in ONNX Gather) and
# padding ids (padding_idx=-2 is written as 8).
_FEED_VALUES: dict[str, dict[str, np.ndarray]] = {
    "gather_negative_index": {"x1": np.array([-1, 0, -6, 5, -3], np.int64)},
    "index_select_negative_index": {"x1": np.array([-5, 4, -1], np.int64)},
    "embedding_float64": {"x0": np.array([[8, 1, 8, 0, 9], [3, 8, 2, 2, 7]], np.int64)},
}


CASES: Final = {
    name: Case(
        op_type,
        build,
        sizes=(Size(1, 5), Size(3, 5)),
        int_high=_INT_HIGH.get(name, 10),  # 10: the embeddings' vocabulary
        values=(_FEED_VALUES.get(name, {}),),
        dims=name in PROGRAMS,
    )
    for name, (op_type, build) in PARITY_PROGRAMS.items()
}
