"""Reductions and scans built by real Paddle: accepted, with the dims and dtypes Paddle records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from graph_proto import framework_pb2 as pb
from tests.conformance.paddle_util import (
    build_and_save,
    dims_differences,
    install_legacy_compat,
    paddle,
    recorded_types,
)
from validator import ValidationFailed, validate

pytestmark = pytest.mark.paddle

# paddle.sum, logsumexp, argmax and argmin only trace to PIR in 3.3.1; the shim appends the
# legacy ops Paddle 2.x wrote.
install_legacy_compat()

Build = Callable[[], tuple[list[Any], list[Any]]]


def _unary(fn: Callable[[Any], Any], shape: list[int], dtype: str = "float32") -> Build:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", shape, dtype)
        out = fn(x)
        return [x], list(out) if isinstance(out, (tuple, list)) else [out]

    return build


def _k_tensor(x: Any) -> Any:
    return paddle.topk(x, paddle.full([1], 2, "int32"), axis=-1, largest=False)


# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "sum_axes_keepdim": ("reduce_sum", _unary(lambda x: paddle.sum(x, axis=[1, 2], keepdim=True), [-1, 3, 4])),
    "sum_all": ("reduce_sum", _unary(paddle.sum, [-1, 3, 4])),
    "sum_int32_to_int64": ("reduce_sum", _unary(lambda x: paddle.sum(x, axis=1), [-1, 3], "int32")),
    "sum_bool_to_int64": ("reduce_sum", _unary(lambda x: paddle.sum(x, axis=-1), [-1, 3], "bool")),
    "sum_dtype_float64": ("reduce_sum", _unary(lambda x: paddle.sum(x, axis=0, dtype="float64"), [-1, 3])),
    "mean_last": ("reduce_mean", _unary(lambda x: paddle.mean(x, axis=-1), [-1, 3, 4])),
    "mean_all": ("reduce_mean", _unary(paddle.mean, [-1, 3, 4])),
    "mean_keepdim_dynamic": ("reduce_mean", _unary(lambda x: paddle.mean(x, axis=[2, 3], keepdim=True), [-1, 8, -1, -1])),
    "max_batch_axis": ("reduce_max", _unary(lambda x: paddle.max(x, axis=[0, 1]), [-1, 3, 4])),
    "max_all_keepdim": ("reduce_max", _unary(lambda x: paddle.max(x, keepdim=True), [-1, 3])),
    "min_keepdim": ("reduce_min", _unary(lambda x: paddle.min(x, axis=1, keepdim=True), [-1, 3, 4])),
    "min_int64": ("reduce_min", _unary(lambda x: paddle.min(x, axis=0), [-1, 3], "int64")),
    "prod_axis": ("reduce_prod", _unary(lambda x: paddle.prod(x, axis=1), [-1, 3, 4])),
    "prod_all": ("reduce_prod", _unary(paddle.prod, [-1, 3, 4])),
    "logsumexp_axis": ("logsumexp", _unary(lambda x: paddle.logsumexp(x, axis=1), [-1, 3, 4])),
    "logsumexp_all": ("logsumexp", _unary(paddle.logsumexp, [-1, 3, 4])),
    "logsumexp_keepdim": ("logsumexp", _unary(lambda x: paddle.logsumexp(x, axis=[-1, -2], keepdim=True), [-1, 3, 4])),
    "norm_p2_axis1": ("p_norm", _unary(lambda x: paddle.linalg.norm(x, p=2, axis=1), [-1, 3, 4])),
    "norm_p1_keepdim": ("p_norm", _unary(lambda x: paddle.linalg.norm(x, p=1, axis=-1, keepdim=True), [-1, 3, 4])),
    "norm_inf": ("p_norm", _unary(lambda x: paddle.linalg.norm(x, p=float("inf"), axis=0), [-1, 3])),
    "argmax_axis_keepdim": ("arg_max", _unary(lambda x: paddle.argmax(x, axis=1, keepdim=True), [-1, 3, 4])),
    "argmax_axis": ("arg_max", _unary(lambda x: paddle.argmax(x, axis=-1), [-1, 3, 4])),
    "argmax_flatten": ("arg_max", _unary(paddle.argmax, [-1, 3, 4])),
    "argmin_int32": ("arg_min", _unary(lambda x: paddle.argmin(x, axis=0, dtype="int32"), [-1, 3])),
    "topk_axis": ("top_k_v2", _unary(lambda x: paddle.topk(x, 2, axis=1), [-1, 3, 4])),
    "topk_dynamic_axis": ("top_k_v2", _unary(lambda x: paddle.topk(x, 3, largest=False), [4, -1])),
    "topk_k_tensor": ("top_k_v2", _unary(_k_tensor, [-1, 3, 4])),
    "cumsum_axis": ("cumsum", _unary(lambda x: paddle.cumsum(x, axis=1), [-1, 3, 4])),
    "cumsum_flatten_known": ("cumsum", _unary(paddle.cumsum, [2, 3, 4])),
    "cumsum_int64": ("cumsum", _unary(lambda x: paddle.cumsum(x, axis=-1), [-1, 5], "int64")),
}  # fmt: skip


def _op_types(program: bytes) -> set[str]:
    return {op.type for op in pb.ProgramDesc.FromString(program).blocks[0].ops}


@pytest.mark.parametrize(("op_type", "build"), PROGRAMS.values(), ids=list(PROGRAMS))
def test_program_matches_paddle(op_type: str, build: Build) -> None:
    saved = build_and_save(build)
    assert op_type in _op_types(saved.program)
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


def test_topk_k_tensor_value_gives_the_axis_length() -> None:
    saved = build_and_save(PROGRAMS["topk_k_tensor"][1])
    validated = validate(saved.program, saved.params)
    values, indices = saved.fetches
    assert recorded_types(saved.program)[values][1] == (-1, 3, -1)  # Paddle: K is a tensor
    assert validated.types[values].shape == validated.types[indices].shape == (-1, 3, 2)


def test_reduce_prod_of_shape_is_folded() -> None:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [2, 3, 4], "float32")
        return [x], [paddle.prod(paddle.shape(x))]

    saved = build_and_save(build)
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert validated.types[out].value == (24,)
    assert dims_differences(validated, saved.program) == []


@pytest.mark.xfail(strict=True, raises=ValidationFailed, reason="core rejects VarDesc dims < -1")
def test_cumsum_flatten_with_unknown_batch() -> None:
    # NOTE: Paddle records product(dims) for a flattened cumsum even with a -1 dim: [-12] here.
    saved = build_and_save(_unary(paddle.cumsum, [-1, 3, 4]))
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-12,)
    validated = validate(saved.program, saved.params)
    assert validated.types[out].shape == (-1,)
