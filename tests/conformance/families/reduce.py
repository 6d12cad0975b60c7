"""Reductions and scans built by real Paddle: accepted, with the dims and dtypes Paddle records.

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_reduce.py has the family's other tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from tests.conformance.op_cases import Adjust, Case, Size
from tests.conformance.paddle_util import (
    install_legacy_compat,
    paddle,
)

# paddle.sum, logsumexp, argmax and argmin only trace to PIR in 3.3.1; the shim appends the
# legacy ops Paddle 2.x wrote.
install_legacy_compat()

Build = Callable[[], tuple[list[Any], list[Any]]]


def unary(fn: Callable[[Any], Any], shape: list[int], dtype: str = "float32") -> Build:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", shape, dtype)
        out = fn(x)
        return [x], list(out) if isinstance(out, (tuple, list)) else [out]

    return build


def _legacy(op_type: str, var_dtype: str | None = None, **attrs: Any) -> Callable[[Any], Any]:
    """One legacy op on X with the given attrs (for attributes the public API does not expose);
    `var_dtype` is the output's, when it is not X's."""

    def fn(x: Any) -> Any:
        helper = paddle.base.layer_helper.LayerHelper(op_type)
        out = helper.create_variable_for_type_inference(var_dtype or x.dtype)
        helper.append_op(type=op_type, inputs={"X": x}, outputs={"Out": out}, attrs=attrs)
        return out

    return fn


def _reduce(op_type: str, dim: list[int], var_dtype: str | None = None, **attrs: Any) -> Any:
    return _legacy(op_type, var_dtype, dim=dim, keep_dim=False, reduce_all=False, **attrs)


def _p_norm(porder: float, axis: int = -1, **attrs: Any) -> Any:
    return _legacy(
        "p_norm", porder=porder, axis=axis, **{"epsilon": 1e-12, "keepdim": False, **attrs}
    )


def _arg(op_type: str, axis: int, **attrs: Any) -> Any:
    attrs = {"keepdims": False, "flatten": False, "dtype": 3, **attrs}
    return _legacy(op_type, "int64" if attrs["dtype"] == 3 else "int32", axis=axis, **attrs)


def _cumsum(**attrs: Any) -> Any:
    return _legacy(
        "cumsum", **{"axis": -1, "flatten": False, "exclusive": False, "reverse": False, **attrs}
    )


def _k_tensor(x: Any) -> Any:
    return paddle.topk(x, paddle.full([1], 2, "int32"), axis=-1, largest=False)


# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "sum_axes_keepdim": ("reduce_sum", unary(lambda x: paddle.sum(x, axis=[1, 2], keepdim=True), [-1, 3, 4])),
    "sum_all": ("reduce_sum", unary(paddle.sum, [-1, 3, 4])),
    "sum_int32_to_int64": ("reduce_sum", unary(lambda x: paddle.sum(x, axis=1), [-1, 3], "int32")),
    "sum_bool_to_int64": ("reduce_sum", unary(lambda x: paddle.sum(x, axis=-1), [-1, 3], "bool")),
    "sum_dtype_float64": ("reduce_sum", unary(lambda x: paddle.sum(x, axis=0, dtype="float64"), [-1, 3])),
    "mean_last": ("reduce_mean", unary(lambda x: paddle.mean(x, axis=-1), [-1, 3, 4])),
    "mean_all": ("reduce_mean", unary(paddle.mean, [-1, 3, 4])),
    "mean_keepdim_dynamic": ("reduce_mean", unary(lambda x: paddle.mean(x, axis=[2, 3], keepdim=True), [-1, 8, -1, -1])),
    "max_batch_axis": ("reduce_max", unary(lambda x: paddle.max(x, axis=[0, 1]), [-1, 3, 4])),
    "max_all_keepdim": ("reduce_max", unary(lambda x: paddle.max(x, keepdim=True), [-1, 3])),
    "min_keepdim": ("reduce_min", unary(lambda x: paddle.min(x, axis=1, keepdim=True), [-1, 3, 4])),
    "min_int64": ("reduce_min", unary(lambda x: paddle.min(x, axis=0), [-1, 3], "int64")),
    "prod_axis": ("reduce_prod", unary(lambda x: paddle.prod(x, axis=1), [-1, 3, 4])),
    "prod_all": ("reduce_prod", unary(paddle.prod, [-1, 3, 4])),
    "logsumexp_axis": ("logsumexp", unary(lambda x: paddle.logsumexp(x, axis=1), [-1, 3, 4])),
    "logsumexp_all": ("logsumexp", unary(paddle.logsumexp, [-1, 3, 4])),
    "logsumexp_keepdim": ("logsumexp", unary(lambda x: paddle.logsumexp(x, axis=[-1, -2], keepdim=True), [-1, 3, 4])),
    "norm_p2_axis1": ("p_norm", unary(lambda x: paddle.linalg.norm(x, p=2, axis=1), [-1, 3, 4])),
    "norm_p1_keepdim": ("p_norm", unary(lambda x: paddle.linalg.norm(x, p=1, axis=-1, keepdim=True), [-1, 3, 4])),
    "norm_inf": ("p_norm", unary(lambda x: paddle.linalg.norm(x, p=float("inf"), axis=0), [-1, 3])),
    "argmax_axis_keepdim": ("arg_max", unary(lambda x: paddle.argmax(x, axis=1, keepdim=True), [-1, 3, 4])),
    "argmax_axis": ("arg_max", unary(lambda x: paddle.argmax(x, axis=-1), [-1, 3, 4])),
    "argmax_flatten": ("arg_max", unary(paddle.argmax, [-1, 3, 4])),
    "argmin_int32": ("arg_min", unary(lambda x: paddle.argmin(x, axis=0, dtype="int32"), [-1, 3])),
    "topk_axis": ("top_k_v2", unary(lambda x: paddle.topk(x, 2, axis=1), [-1, 3, 4])),
    "topk_dynamic_axis": ("top_k_v2", unary(lambda x: paddle.topk(x, 3, largest=False), [4, -1])),
    "topk_k_tensor": ("top_k_v2", unary(_k_tensor, [-1, 3, 4])),
    "cumsum_axis": ("cumsum", unary(lambda x: paddle.cumsum(x, axis=1), [-1, 3, 4])),
    "cumsum_flatten_known": ("cumsum", unary(paddle.cumsum, [2, 3, 4])),
    "cumsum_int64": ("cumsum", unary(lambda x: paddle.cumsum(x, axis=-1), [-1, 5], "int64")),
    # Lowering variants: dtypes, 0-D inputs, attributes only legacy programs set.
    "sum_0d_int32": ("reduce_sum", unary(paddle.sum, [], "int32")),
    "sum_out_bool": ("reduce_sum", unary(_reduce("reduce_sum", [1], "bool", out_dtype=0), [-1, 3])),
    "sum_int8_wraps": ("reduce_sum", unary(_reduce("reduce_sum", [0, 1]), [-1, 6], "int8")),
    "sum_all_keepdim_float64": ("reduce_sum", unary(lambda x: paddle.sum(x, keepdim=True), [-1, 2, 3], "float64")),
    "mean_int64_truncates": ("reduce_mean", unary(_reduce("reduce_mean", [1]), [-1, 4], "int64")),
    "max_int32_ties": ("reduce_max", unary(lambda x: paddle.max(x, axis=-1), [-1, 4], "int32")),
    "min_all": ("reduce_min", unary(paddle.min, [-1, 3, 4])),
    "prod_int64_keepdim": ("reduce_prod", unary(lambda x: paddle.prod(x, axis=0, keepdim=True), [-1, 3], "int64")),
    "logsumexp_large": ("logsumexp", unary(lambda x: paddle.logsumexp(x, axis=-1), [-1, 4])),
    "logsumexp_0d": ("logsumexp", unary(paddle.logsumexp, [])),
    "norm_p0": ("p_norm", unary(_p_norm(0.0, 1), [-1, 5])),
    "norm_neg_inf_keepdim": ("p_norm", unary(_p_norm(-float("inf"), 0, keepdim=True), [-1, 3])),
    "norm_p3_asvector": ("p_norm", unary(_p_norm(3.0, asvector=True), [-1, 3, 4])),
    "norm_fractional_negative": ("p_norm", unary(_p_norm(-1.5, 1), [-1, 5])),
    "norm_epsilon_unused": ("p_norm", unary(_legacy("p_norm", porder=2.0, axis=-1, epsilon=1.0), [-1, 3])),
    "norm_float64": ("p_norm", unary(lambda x: paddle.linalg.norm(x, p=2, axis=0), [-1, 3], "float64")),
    "norm_0d": ("p_norm", unary(_p_norm(2.0, 0), [])),
    "norm_0d_negative_p": ("p_norm", unary(_p_norm(-1.5, 0), [])),
    "norm_0d_inf": ("p_norm", unary(_p_norm(float("inf"), 0), [])),
    "norm_0d_asvector": ("p_norm", unary(_p_norm(3.0, 0, asvector=True), [])),
    "norm_0d_p0_asvector": ("p_norm", unary(_p_norm(0.0, 0, asvector=True), [])),
    "argmax_ties": ("arg_max", unary(lambda x: paddle.argmax(x, axis=1), [-1, 6])),
    "argmin_ties_keepdim": ("arg_min", unary(lambda x: paddle.argmin(x, axis=-1, keepdim=True), [-1, 6])),
    "argmax_flatten_keepdim_int32": ("arg_max", unary(_arg("arg_max", 0, flatten=True, keepdims=True, dtype=2), [-1, 3, 4])),
    "argmin_flatten_ties": ("arg_min", unary(_arg("arg_min", 1, flatten=True), [-1, 4])),
    "argmax_int64_input": ("arg_max", unary(lambda x: paddle.argmax(x, axis=0), [-1, 3], "int64")),
    "argmax_0d": ("arg_max", unary(lambda x: paddle.argmax(x, axis=0), [])),
    "topk_smallest_axis0": ("top_k_v2", unary(lambda x: paddle.topk(x, 1, axis=0, largest=False), [-1, 4])),
    "topk_int32": ("top_k_v2", unary(lambda x: paddle.topk(x, 2), [-1, 6], "int32")),
    "topk_float64_all": ("top_k_v2", unary(lambda x: paddle.topk(x, 5, axis=-1), [-1, 5], "float64")),
    "cumsum_exclusive": ("cumsum", unary(_cumsum(axis=1, exclusive=True), [-1, 3, 4])),
    "cumsum_reverse": ("cumsum", unary(_cumsum(axis=0, reverse=True), [-1, 3])),
    "cumsum_flatten_exclusive_reverse": ("cumsum", unary(_cumsum(flatten=True, exclusive=True, reverse=True), [2, 3])),
    "cumsum_int32": ("cumsum", unary(lambda x: paddle.cumsum(x, axis=0), [-1, 4], "int32")),
    "cumsum_0d": ("cumsum", unary(lambda x: paddle.cumsum(x, axis=0), [])),
}  # fmt: skip


# NOTE: Paddle's CPU kernels refuse float16 ("float16 can only be used on GPU"); float16
# lowerings are checked against numpy by the op cases (tests/ops/test_lowering.py).
# Feeds reshaped for the variant a program checks: ties, negatives, large magnitudes, overflow.
TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sum_int8_wraps": lambda a: a * 60,  # up to 180 per element: int8 sums wrap
    "mean_int64_truncates": lambda a: a - 2,
    "max_int32_ties": lambda a: a % 2,
    "logsumexp_large": lambda a: a * 1000,
    "norm_p0": lambda a: np.where(a > 0, a, 0),
    "norm_epsilon_unused": lambda a: a * 0,
    "argmax_ties": np.round,
    "argmin_ties_keepdim": np.round,
    "argmin_flatten_ties": np.round,
    "argmax_int64_input": lambda a: a % 2,
    # Paddle's CPU top_k leaves tied indices in std::partial_sort's order: distinct values only.
    "topk_int32": lambda a: np.random.default_rng(1).permutation(a.size).reshape(a.shape),
}


def _transformed(transform: Callable[[np.ndarray], np.ndarray]) -> Adjust:
    return lambda feeds: {k: np.asarray(transform(v)).astype(v.dtype) for k, v in feeds.items()}


CASES: Final = {
    name: Case(
        op_type,
        build,
        sizes=(Size(1, 5, 1), Size(3, 5, 3)),
        adjust=_transformed(TRANSFORMS[name]) if name in TRANSFORMS else None,
    )
    for name, (op_type, build) in PROGRAMS.items()
}
