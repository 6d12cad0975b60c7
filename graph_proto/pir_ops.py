"""The one table that maps Paddle 3's PIR `pd_op` dialect onto graphgate's (legacy) op declarations.

A PIR op becomes the legacy op Paddle itself would have written, so validation, budgets and
lowering are shared with `.pdmodel` programs. Per PIR op:
  - `inputs`: one entry per PIR operand, in order: `"X"` a tensor slot, `"X*"` a variadic slot
    fed by a `builtin.combine`, `"=name"` an operand that must be a constant (`pd_op.full` or
    `pd_op.full_int_array`) folded into the legacy attribute `name`, `"=name|Slot"` folded when
    constant and wired to the tensor slot `Slot` otherwise, `""` an operand that must be absent;
  - `outputs`: one legacy slot per PIR result (`"Out*"`: a vector result, taken apart by
    `builtin.split`);
  - `attrs`: PIR attribute name -> legacy name (None: dropped); unnamed ones keep their name;
  - `fixed`: legacy attributes PIR leaves implicit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class OpMap:
    legacy: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...] = ("Out",)
    attrs: Mapping[str, str | None] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    # The legacy attribute that takes the PIR input's dtype (cast.in_dtype).
    input_dtype_attr: str | None = None


# PIR-only bookkeeping attributes: never semantic (struct_name is the exporting module path).
DROPPED_ATTRS: Final = frozenset({"struct_name", "place", "stop_gradient", "persistable"})
DIALECTS: Final = {"0": "builtin", "1": "pd_op", "2": "cf"}
# Ops the converter handles itself (values, feeds, fetches, control flow), not through OPS.
STRUCTURAL: Final = frozenset(
    {
        "builtin.parameter",
        "builtin.combine",
        "builtin.split",
        "pd_op.data",
        "pd_op.fetch",
        "pd_op.full",
        "pd_op.full_int_array",
        "pd_op.if",
        "pd_op.while",
        "cf.yield",
    }
)


def _unary(legacy: str, **fixed: Any) -> OpMap:
    return OpMap(legacy, ("X",), fixed=fixed)


def _binary(legacy: str, **fixed: Any) -> OpMap:
    return OpMap(legacy, ("X", "Y"), fixed=fixed)


def _elementwise(legacy: str) -> OpMap:
    return OpMap(legacy, ("X", "Y"), fixed={"axis": -1})


def _reduce(legacy: str) -> OpMap:
    return OpMap(legacy, ("X", "=dim"), attrs={"keepdim": "keep_dim"})


_CONV_ATTRS: Final = {"data_format": "data_format"}

OPS: Final[Mapping[str, OpMap]] = {
    # Convolution, normalisation, pooling.
    "pd_op.conv2d": OpMap("conv2d", ("Input", "Filter"), ("Output",), _CONV_ATTRS),
    "pd_op.depthwise_conv2d": OpMap(
        "depthwise_conv2d", ("Input", "Filter"), ("Output",), _CONV_ATTRS
    ),
    "pd_op.batch_norm": OpMap(
        "batch_norm",
        ("X", "Mean", "Variance", "Scale", "Bias"),
        ("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance", "ReserveSpace"),
        {"data_format": "data_layout"},
    ),
    "pd_op.layer_norm": OpMap("layer_norm", ("X", "Scale", "Bias"), ("Y", "Mean", "Variance")),
    "pd_op.pool2d": OpMap("pool2d", ("X", "=ksize")),
    "pd_op.dropout": OpMap(
        "dropout", ("X", "", "=dropout_prob"), ("Out", "Mask"), {"mode": "dropout_implementation"}
    ),
    # Shapes and layout.
    "pd_op.reshape": OpMap("reshape2", ("X", "=shape|ShapeTensor"), ("Out", "XShape")),
    "pd_op.flatten": OpMap("flatten_contiguous_range", ("X",), ("Out", "XShape")),
    "pd_op.transpose": OpMap("transpose2", ("X",), ("Out", "XShape"), {"perm": "axis"}),
    "pd_op.squeeze": OpMap("squeeze2", ("X", "=axes"), ("Out", "XShape")),
    "pd_op.unsqueeze": OpMap("unsqueeze2", ("X", "=axes"), ("Out", "XShape")),
    "pd_op.concat": OpMap("concat", ("X*", "=axis")),
    "pd_op.split": OpMap("split", ("X", "=sections", "=axis"), ("Out*",)),
    "pd_op.split_with_num": OpMap("split", ("X", "=axis"), ("Out*",)),
    "pd_op.stack": OpMap("stack", ("X*",), ("Y",)),
    "pd_op.slice": OpMap("slice", ("Input", "=starts", "=ends")),
    "pd_op.shape64": OpMap("shape", ("Input",)),
    "pd_op.shape": OpMap("shape", ("Input",)),
    "pd_op.cast": OpMap("cast", ("X",), attrs={"dtype": "out_dtype"}, input_dtype_attr="in_dtype"),
    "pd_op.assign": _unary("assign"),
    "pd_op.embedding": OpMap("lookup_table_v2", ("Ids", "W"), attrs={"sparse": None}),
    # Arithmetic.
    "pd_op.add": _elementwise("elementwise_add"),
    "pd_op.subtract": _elementwise("elementwise_sub"),
    "pd_op.multiply": _elementwise("elementwise_mul"),
    "pd_op.divide": _elementwise("elementwise_div"),
    "pd_op.maximum": _elementwise("elementwise_max"),
    "pd_op.minimum": _elementwise("elementwise_min"),
    "pd_op.elementwise_pow": _elementwise("elementwise_pow"),
    "pd_op.matmul": OpMap(
        "matmul_v2", ("X", "Y"), attrs={"transpose_x": "trans_x", "transpose_y": "trans_y"}
    ),
    "pd_op.scale": OpMap("scale", ("X", "=scale")),
    "pd_op.mean": _reduce("reduce_mean"),
    "pd_op.sum": OpMap("reduce_sum", ("X", "=dim"), attrs={"keepdim": "keep_dim", "dtype": None}),
    "pd_op.max": _reduce("reduce_max"),
    "pd_op.min": _reduce("reduce_min"),
    # Activations.
    "pd_op.relu": _unary("relu"),
    "pd_op.relu6": _unary("relu6", threshold=6.0),
    "pd_op.sigmoid": _unary("sigmoid"),
    "pd_op.tanh": _unary("tanh"),
    "pd_op.exp": _unary("exp"),
    "pd_op.sqrt": _unary("sqrt"),
    "pd_op.abs": _unary("abs"),
    "pd_op.silu": _unary("silu"),
    "pd_op.swish": _unary("swish", beta=1.0),
    "pd_op.gelu": _unary("gelu"),
    "pd_op.hardswish": _unary("hard_swish", threshold=6.0, scale=6.0, offset=3.0),
    "pd_op.hardsigmoid": _unary("hard_sigmoid"),
    "pd_op.softmax": _unary("softmax"),
    "pd_op.logical_not": _unary("logical_not"),
    # Comparisons.
    "pd_op.greater_than": _elementwise("greater_than"),
    "pd_op.less_than": _elementwise("less_than"),
    "pd_op.equal": _elementwise("equal"),
    "pd_op.not_equal": _elementwise("not_equal"),
    "pd_op.greater_equal": _elementwise("greater_equal"),
    "pd_op.less_equal": _elementwise("less_equal"),
    "pd_op.logical_and": _binary("logical_and"),
    "pd_op.logical_or": _binary("logical_or"),
}
