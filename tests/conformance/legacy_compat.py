"""Lets Paddle 3.3.1's public API trace into legacy ProgramDesc programs again.

In Paddle 3.3.1 some public functions (paddle.matmul, paddle.sum, paddle.tanh,
paddle.nn.functional.gelu, ...) are the C++ `_C_ops` builtins themselves, re-exported into
paddle, paddle.tensor.* and paddle.nn.functional (the tables `funcs_map` and `nn_funcs_map` of
paddle/base/dygraph/generated_tensor_methods_patch.py). They accept eager Tensors and PIR Values
only; with FLAGS_enable_pir_api=0 a static `Variable` is refused ("must be Value, but got
Variable"), so nn.TransformerEncoder and friends cannot be saved as a legacy program.

install() swaps every such module attribute for a dispatcher: a legacy `Variable` first argument
gets the legacy operator appended with LayerHelper (the OpDesc Paddle 2.x wrote: same op type,
slots and attrs; OpDesc.check_attrs fills the remaining defaults and infer_shape records the
dims), anything else goes to the original builtin. Test-only code; never imported by graphgate.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import paddle
from paddle.base import core, framework
from paddle.base.data_feeder import convert_dtype
from paddle.base.dygraph import generated_tensor_methods_patch as generated
from paddle.base.layer_helper import LayerHelper

_VT = core.VarDesc.VarType
_installed: list[str] = []


def _is_legacy_var(x: object) -> bool:
    """A static-graph Variable of a legacy Program (eager Tensors also pass isinstance Variable)."""
    if framework.in_dygraph_mode() or framework.in_pir_mode():
        return False
    return isinstance(x, framework.Variable)


def _var_dtype(dtype: Any) -> Any:
    """A VarType for 'float32', np.float32, paddle.float32 or a VarType."""
    if isinstance(dtype, _VT):
        return dtype
    return framework.convert_np_dtype_to_dtype_(convert_dtype(dtype))


def _append(
    op_type: str,
    inputs: dict[str, Any],
    attrs: dict[str, Any] | None = None,
    dtype: Any = None,
) -> Any:
    """Appends one legacy op with a single output slot `Out`; returns the output Variable."""
    helper = LayerHelper(op_type)
    first = next(iter(inputs.values()))
    out = helper.create_variable_for_type_inference(first.dtype if dtype is None else dtype)
    helper.append_op(type=op_type, inputs=inputs, outputs={"Out": out}, attrs=attrs or {})
    return out


def _as_var(y: Any, like: Any) -> Any:
    """A Python scalar operand becomes a [1] fill_constant of the other operand's dtype."""
    return y if isinstance(y, framework.Variable) else paddle.full([1], y, like.dtype)


def _reduce_axes(axis: int | Sequence[int] | None, x: Any) -> tuple[list[int], bool]:
    """(dim, reduce_all) the way Paddle 2.x reduce_* wrappers wrote them."""
    if axis is None:
        return [], True
    dims = [axis] if isinstance(axis, int) else list(axis)
    return dims, len(dims) == 0 or len(dims) == len(x.shape)


# -- lowerings: public signature in, legacy op out ------------------------------------------


def _unary(op_type: str, out_dtype: Any = None) -> Callable[..., Any]:
    def lower(x: Any, name: str | None = None) -> Any:
        return _append(op_type, {"X": x}, dtype=out_dtype)

    return lower


def _round(x: Any, decimals: int = 0, name: str | None = None) -> Any:
    return _append("round", {"X": x}, {"decimals": decimals})


def _elementwise(op_type: str) -> Callable[..., Any]:
    def lower(x: Any, y: Any, name: str | None = None) -> Any:
        return _append(op_type, {"X": x, "Y": _as_var(y, x)}, {"axis": -1})

    return lower


def _compare(op_type: str) -> Callable[..., Any]:
    def lower(x: Any, y: Any, name: str | None = None) -> Any:
        return _append(op_type, {"X": x, "Y": _as_var(y, x)}, {"axis": -1}, dtype=_VT.BOOL)

    return lower


def _logical(op_type: str) -> Callable[..., Any]:
    def lower(x: Any, y: Any, out: Any = None, name: str | None = None) -> Any:
        return _append(op_type, {"X": x, "Y": _as_var(y, x)}, dtype=_VT.BOOL)

    return lower


def _logical_not(x: Any, out: Any = None, name: str | None = None) -> Any:
    return _append("logical_not", {"X": x}, dtype=_VT.BOOL)


def _matmul(
    x: Any, y: Any, transpose_x: bool = False, transpose_y: bool = False, name: str | None = None
) -> Any:
    attrs = {"trans_x": bool(transpose_x), "trans_y": bool(transpose_y)}
    return _append("matmul_v2", {"X": x, "Y": y}, attrs)


def _two_inputs(op_type: str) -> Callable[..., Any]:
    def lower(x: Any, y: Any, name: str | None = None) -> Any:
        return _append(op_type, {"X": x, "Y": y})

    return lower


def _sum(
    x: Any,
    axis: int | Sequence[int] | None = None,
    dtype: Any = None,
    keepdim: bool = False,
    name: str | None = None,
) -> Any:
    dims, reduce_all = _reduce_axes(axis, x)
    attrs: dict[str, Any] = {"dim": dims, "keep_dim": keepdim, "reduce_all": reduce_all}
    if dtype is not None:
        out_dtype = _var_dtype(dtype)
        attrs.update(in_dtype=int(x.dtype), out_dtype=int(out_dtype))
    elif x.dtype in (_VT.BOOL, _VT.INT32):
        out_dtype = _VT.INT64  # SumRawInferMeta's promotion
    else:
        out_dtype = x.dtype
    return _append("reduce_sum", {"X": x}, attrs, dtype=out_dtype)


def _reduce(op_type: str, out_dtype: Any = None) -> Callable[..., Any]:
    def lower(
        x: Any,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        name: str | None = None,
    ) -> Any:
        dims, reduce_all = _reduce_axes(axis, x)
        attrs = {"dim": dims, "keep_dim": keepdim, "reduce_all": reduce_all}
        return _append(op_type, {"X": x}, attrs, dtype=out_dtype)

    return lower


def _logsumexp(
    x: Any, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None
) -> Any:
    dims, reduce_all = _reduce_axes(axis, x)
    attrs = {"axis": dims or [0], "keepdim": keepdim, "reduce_all": reduce_all}
    return _append("logsumexp", {"X": x}, attrs)


def _arg(op_type: str) -> Callable[..., Any]:
    def lower(
        x: Any,
        axis: int | None = None,
        keepdim: bool = False,
        dtype: Any = "int64",
        name: str | None = None,
    ) -> Any:
        out_dtype = _var_dtype(dtype)
        attrs = {
            "axis": 0 if axis is None else int(axis),
            "keepdims": keepdim,
            "flatten": axis is None,
            "dtype": int(out_dtype),
        }
        return _append(op_type, {"X": x}, attrs, dtype=out_dtype)

    return lower


def _gelu(x: Any, approximate: bool | str = False, name: str | None = None) -> Any:
    if isinstance(approximate, str):
        approximate = approximate == "tanh"
    return _append("gelu", {"X": x}, {"approximate": bool(approximate)})


def _softplus(x: Any, beta: float = 1, threshold: float = 20, name: str | None = None) -> Any:
    return _append("softplus", {"X": x}, {"beta": float(beta), "threshold": float(threshold)})


def _tril_triu(lower_part: bool) -> Callable[..., Any]:
    def lower(x: Any, diagonal: int = 0, name: str | None = None) -> Any:
        return _append("tril_triu", {"X": x}, {"diagonal": diagonal, "lower": lower_part})

    return lower


def _expand_as(x: Any, y: Any, name: str | None = None) -> Any:
    return _append("expand_as_v2", {"X": x, "Y": y}, {"target_shape": list(y.shape)})


def _roll(
    x: Any,
    shifts: int | Sequence[int],
    axis: int | Sequence[int] | None = None,
    name: str | None = None,
) -> Any:
    shift_list = [shifts] if isinstance(shifts, int) else list(shifts)
    axes = [] if axis is None else [axis] if isinstance(axis, int) else list(axis)
    return _append("roll", {"X": x}, {"shifts": shift_list, "axis": axes})


def _diagonal(
    x: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, name: str | None = None
) -> Any:
    return _append("diagonal", {"Input": x}, {"offset": offset, "axis1": axis1, "axis2": axis2})


_UNARY = (
    "abs", "acos", "acosh", "asin", "atanh", "ceil", "cos", "cosh", "exp", "expm1", "floor",
    "log", "log1p", "log2", "log10", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tanh",
)  # fmt: skip

LOWERINGS: dict[str, Callable[..., Any]] = {
    **{name: _unary(name) for name in _UNARY},
    "round": _round,
    "isfinite": _unary("isfinite_v2", _VT.BOOL),
    "isinf": _unary("isinf_v2", _VT.BOOL),
    "isnan": _unary("isnan_v2", _VT.BOOL),
    "multiply": _elementwise("elementwise_mul"),
    "maximum": _elementwise("elementwise_max"),
    "minimum": _elementwise("elementwise_min"),
    "greater_than": _compare("greater_than"),
    "logical_and": _logical("logical_and"),
    "logical_or": _logical("logical_or"),
    "logical_xor": _logical("logical_xor"),
    "logical_not": _logical_not,
    "matmul": _matmul,
    "bmm": _two_inputs("bmm"),
    "dot": _two_inputs("dot"),
    "sum": _sum,
    "amax": _reduce("reduce_amax"),
    "amin": _reduce("reduce_amin"),
    "all": _reduce("reduce_all", _VT.BOOL),
    "any": _reduce("reduce_any", _VT.BOOL),
    "logsumexp": _logsumexp,
    "argmax": _arg("arg_max"),
    "argmin": _arg("arg_min"),
    "gelu": _gelu,
    "softplus": _softplus,
    "tril": _tril_triu(True),
    "triu": _tril_triu(False),
    "expand_as": _expand_as,
    "roll": _roll,
    "diagonal": _diagonal,
}


def _dispatcher(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    lowering = LOWERINGS.get(name)

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        x = args[0] if args else kwargs.get("x", kwargs.get("input"))
        if not _is_legacy_var(x):
            return original(*args, **kwargs)
        if lowering is None:
            raise NotImplementedError(f"legacy_compat has no legacy lowering for paddle.{name}")
        return lowering(*args, **kwargs)

    dispatch.__name__ = dispatch.__qualname__ = name
    dispatch.__wrapped__ = original  # type: ignore[attr-defined]
    return dispatch


def _namespaces() -> list[tuple[str, Any]]:
    """Every loaded paddle.* module, plus the `paddle.tensor` proxy object.

    `paddle.tensor` is a _TensorMethodOrModule (callable as paddle.tensor(...)), not the module;
    the generated methods were set as its own attributes, shadowing the module's. The raw op
    tables (paddle._C_ops, paddle._pir_ops, paddle.base.libpaddle) are left alone.
    """
    found = [
        (name, module)
        for name, module in list(sys.modules.items())
        if module is not None
        and name.startswith("paddle")
        and not name.startswith(("paddle._C_ops", "paddle._pir_ops", "paddle.base.libpaddle"))
    ]
    if not isinstance(paddle.tensor, type(sys)):
        found.append(("paddle.tensor<proxy>", paddle.tensor))
    return found


def install() -> list[str]:
    """Patches every paddle.* attribute bound to a PIR-only builtin (idempotent).

    Returns the patched 'namespace.name' entries. Modules imported later are not patched, so
    call this after importing the paddle APIs a model uses (importing paddle loads them all).
    """
    if _installed:
        return list(_installed)
    from paddle import _C_ops

    namespaces = _namespaces()
    for name, wrapper in [*generated.funcs_map, *generated.nn_funcs_map]:
        originals = [wrapper]
        raw = getattr(_C_ops, name, None)
        if raw is not None:
            originals.append(raw)
        dispatch = _dispatcher(name, wrapper)
        for namespace_name, namespace in namespaces:
            current = getattr(namespace, "__dict__", {}).get(name)
            if current is not None and any(current is o for o in originals):
                setattr(namespace, name, dispatch)
                _installed.append(f"{namespace_name}.{name}")
    return list(_installed)
