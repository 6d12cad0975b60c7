"""The one table that maps Paddle 3's PIR `pd_op` dialect onto graphgate's (legacy) op declarations.

A PIR op becomes the legacy op Paddle itself would have written, so validation, budgets and
lowering are shared with `.pdmodel` programs. Per PIR op:
  - `inputs`: one entry per PIR operand, in order: `"X"` a tensor slot, `"X*"` a variadic slot
    fed by a `builtin.combine`, `"-"` an operand the legacy op has no slot for (the tensor an
    in-place PIR op overwrites, e.g. assign_value_'s), `"=name"` an operand that must be a constant (`pd_op.full` or
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

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr


@dataclass(frozen=True, slots=True)
class OpMap:
    legacy: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...] = ("Out",)
    attrs: Mapping[str, str | None] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    # The legacy attribute that takes the PIR input's dtype (cast.in_dtype).
    input_dtype_attr: str | None = None
    # PIR attributes Paddle's legacy op keeps as SCALARS (set_value/assign_value `values`).
    scalars: frozenset[str] = frozenset()
    # The dtype the legacy op yields where the PIR op yields another (shape: int32, shape64:
    # int64): its result is cast to the PIR result's dtype.
    legacy_dtype: int | None = None
    # Empty PIR lists that the legacy attribute types otherwise (interp `scale`: FLOATS).
    empty: Mapping[str, int] = field(default_factory=dict)
    # Legacy attributes Paddle writes even where a tensor operand gives the value.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # Constant operands become tensors of the PIR result's dtype (arange's start/end/step).
    constants_like_result: bool = False
    # The operand an in-place PIR op (name ending in `_`) overwrites: the legacy op writes
    # its first output into that same var, as Paddle's legacy in-place ops do.
    in_place: str | None = None


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


def _interp(legacy: str) -> OpMap:
    """`*_interp`: the size or scale comes from attributes, or from optional tensors."""
    return OpMap(
        legacy,
        ("X", "OutSize", "SizeTensor*", "Scale"),
        attrs={"data_format": "data_layout"},
        empty={"scale": pb.FLOATS},
    )


def _arg(legacy: str) -> OpMap:
    return OpMap(legacy, ("X", "=axis"))


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
    "pd_op.group_norm": OpMap(
        "group_norm",
        ("X", "Scale", "Bias"),
        ("Y", "Mean", "Variance"),
        {"data_format": "data_layout"},
    ),
    "pd_op.instance_norm": OpMap(
        "instance_norm", ("X", "Scale", "Bias"), ("Y", "SavedMean", "SavedVariance")
    ),
    "pd_op.conv2d_transpose": OpMap(
        "conv2d_transpose", ("Input", "Filter", "=output_size"), ("Output",), _CONV_ATTRS
    ),
    "pd_op.depthwise_conv2d_transpose": OpMap(
        "depthwise_conv2d_transpose", ("Input", "Filter", "=output_size"), ("Output",), _CONV_ATTRS
    ),
    "pd_op.rnn": OpMap(
        "rnn",
        # The fifth operand is the dropout state (a parameter): inference never reads it.
        ("Input", "PreState*", "WeightList*", "SequenceLength", "-"),
        ("Out", "DropoutState", "State*", "Reserve"),
    ),
    "pd_op.dropout": OpMap(
        "dropout", ("X", "", "=dropout_prob"), ("Out", "Mask"), {"mode": "dropout_implementation"}
    ),
    # Shapes and layout.
    "pd_op.reshape": OpMap("reshape2", ("X", "=shape|Shape"), ("Out", "XShape")),
    "pd_op.flatten": OpMap("flatten_contiguous_range", ("X",), ("Out", "XShape")),
    "pd_op.transpose": OpMap("transpose2", ("X",), ("Out", "XShape"), {"perm": "axis"}),
    "pd_op.squeeze": OpMap("squeeze2", ("X", "=axes"), ("Out", "XShape")),
    "pd_op.unsqueeze": OpMap("unsqueeze2", ("X", "=axes|AxesTensor"), ("Out", "XShape")),
    "pd_op.concat": OpMap("concat", ("X*", "=axis")),
    "pd_op.split": OpMap("split", ("X", "=sections", "=axis"), ("Out*",)),
    "pd_op.split_with_num": OpMap("split", ("X", "=axis"), ("Out*",)),
    "pd_op.stack": OpMap("stack", ("X*",), ("Y",)),
    "pd_op.slice": OpMap("slice", ("Input", "=starts|StartsTensor", "=ends|EndsTensor")),
    "pd_op.strided_slice": OpMap(
        "strided_slice",
        ("Input", "=starts|StartsTensor", "=ends|EndsTensor", "=strides|StridesTensor"),
    ),
    "pd_op.shape64": OpMap("shape", ("Input",), legacy_dtype=pb.VarType.INT32),
    "pd_op.shape": OpMap("shape", ("Input",)),
    "pd_op.expand": OpMap("expand_v2", ("X", "=shape|Shape")),
    "pd_op.tile": OpMap("tile", ("X", "=repeat_times|RepeatTimes")),
    "pd_op.roll": OpMap("roll", ("X", "=shifts|ShiftsTensor")),
    "pd_op.flip": _unary("flip"),
    "pd_op.meshgrid": OpMap("meshgrid", ("X*",), ("Out*",)),
    # paddle.nn.functional.pad with a width for every dim (MobileBERT's embeddings).
    "pd_op.pad": OpMap("pad", ("X", "=pad_value")),
    "pd_op.pad3d": OpMap(
        "pad3d",
        ("X", "=paddings|Paddings"),
        attrs={"pad_value": "value"},
        defaults={"paddings": Attr(pb.INTS, [])},
    ),
    "pd_op.pixel_shuffle": _unary("pixel_shuffle"),
    "pd_op.unfold": OpMap("unfold", ("X",), ("Y",)),
    "pd_op.nearest_interp": _interp("nearest_interp_v2"),
    "pd_op.bilinear_interp": _interp("bilinear_interp_v2"),
    "pd_op.linear_interp": _interp("linear_interp_v2"),
    "pd_op.bicubic_interp": _interp("bicubic_interp_v2"),
    "pd_op.trilinear_interp": _interp("trilinear_interp_v2"),
    # Creation, indexing, writes.
    "pd_op.full_like": OpMap("fill_any_like", ("X", "=value")),
    "pd_op.full_with_tensor": OpMap("fill_constant", ("=value|ValueTensor", "ShapeTensor")),
    "pd_op.arange": OpMap(
        "range", ("Start", "End", "Step"), attrs={"dtype": None}, constants_like_result=True
    ),
    "pd_op.assign_value_": OpMap("assign_value", ("-",), scalars=frozenset({"values"})),
    "pd_op.gather": OpMap("gather", ("X", "Index", "=axis|Axis")),
    "pd_op.index_select": OpMap("index_select", ("X", "Index"), attrs={"axis": "dim"}),
    "pd_op.one_hot": OpMap(
        "one_hot_v2", ("X", "=depth|depth_tensor"), fixed={"dtype": 5, "allow_out_of_range": False}
    ),
    "pd_op.where": OpMap("where", ("Condition", "X", "Y")),
    "pd_op.masked_fill": OpMap("masked_fill", ("x", "mask", "value"), ("out",)),
    "pd_op.set_value_": OpMap(
        "set_value",
        ("Input", "=starts", "=ends", "=steps"),
        scalars=frozenset({"values"}),
        input_dtype_attr="dtype",
    ),
    "pd_op.set_value_with_tensor_": OpMap(
        "set_value",
        ("Input", "ValueTensor", "=starts", "=ends", "=steps"),
        input_dtype_attr="dtype",
    ),
    "pd_op.cast": OpMap("cast", ("X",), attrs={"dtype": "out_dtype"}, input_dtype_attr="in_dtype"),
    "pd_op.assign": _unary("assign"),
    "pd_op.increment": OpMap("increment", ("X",), attrs={"value": "step"}, in_place="X"),
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
    "pd_op.sum": OpMap(
        "reduce_sum", ("X", "=dim"), attrs={"keepdim": "keep_dim", "dtype": "out_dtype"}
    ),
    "pd_op.max": _reduce("reduce_max"),
    "pd_op.min": _reduce("reduce_min"),
    "pd_op.prod": _reduce("reduce_prod"),
    "pd_op.logsumexp": _unary("logsumexp"),
    "pd_op.p_norm": _unary("p_norm"),
    "pd_op.argmax": _arg("arg_max"),
    "pd_op.argmin": _arg("arg_min"),
    "pd_op.cumsum": _arg("cumsum"),
    "pd_op.topk": OpMap("top_k_v2", ("X", "=k|K"), ("Out", "Indices")),
    "pd_op.floor_divide": _elementwise("elementwise_floordiv"),
    "pd_op.clip": OpMap("clip", ("X", "=min|Min", "=max|Max")),
    "pd_op.pow": OpMap("pow", ("X",), attrs={"y": "factor"}),
    "pd_op.square": _unary("square"),
    "pd_op.erf": _unary("erf"),
    "pd_op.bitwise_not": _unary("bitwise_not"),
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
    "pd_op.log_softmax": _unary("log_softmax"),
    "pd_op.elu": _unary("elu"),
    "pd_op.leaky_relu": OpMap("leaky_relu", ("X",), attrs={"negative_slope": "alpha"}),
    "pd_op.prelu": OpMap("prelu", ("X", "Alpha")),
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
    # Element-wise math.
    "pd_op.ceil": _unary("ceil"),
    "pd_op.floor": _unary("floor"),
    "pd_op.log": _unary("log"),
    "pd_op.rsqrt": _unary("rsqrt"),
    "pd_op.sin": _unary("sin"),
    "pd_op.cos": _unary("cos"),
    "pd_op.softplus": _unary("softplus"),
    # Detection post-processing (paddle.vision.ops.yolo_box; multiclass_nms3's optional
    # RoisNum is operand 2, id 0 when absent).
    "pd_op.yolo_box": OpMap("yolo_box", ("X", "ImgSize"), ("Boxes", "Scores")),
    "pd_op.multiclass_nms3": OpMap(
        "multiclass_nms3", ("BBoxes", "Scores", "RoisNum"), ("Out", "Index", "NmsRoisNum")
    ),
}

# Legacy op declarations no PIR op maps onto through OPS, and why: either the converter writes
# them itself for a PIR construct, or Paddle 3 never emits their PIR form.
NOT_IN_TABLE: Final[Mapping[str, str]] = {
    "feed": "written by the converter for each pd_op.data",
    "fetch": "written by the converter for each pd_op.fetch",
    "conditional_block": "written by the converter for each branch of a pd_op.if",
    "select_input": "written by the converter to merge a pd_op.if's branch results",
    "while": "written by the converter for each pd_op.while",
    # Paddle 3.3.1's own program translator (paddle.pir.translate_to_pir) rewrites these two
    # 1.x ops into pd_op ops this table maps, and paddle.matmul / fc trace to pd_op.matmul.
    "matmul": "the 1.x matmul (alpha): Paddle 3 writes pd_op.matmul (+ pd_op.scale for alpha)",
    "mul": "the 1.x fc's mul (x_num_col_dims): Paddle 3 writes pd_op.reshape, pd_op.matmul, "
    "pd_op.reshape",
}
