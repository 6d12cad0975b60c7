"""Activation ops built by real Paddle: the attrs it writes are accepted, graphgate's dims match.

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_activation.py has the family's other tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from tests.conformance.op_cases import Adjust, Case
from tests.conformance.paddle_util import paddle

F = paddle.nn.functional
Build = Callable[[], tuple[Sequence[Any], Sequence[Any]]]


def data(shape: Sequence[int], dtype: str = "float32", name: str = "x") -> Any:
    return paddle.static.data(name, list(shape), dtype)


def legacy(
    op_type: str,
    inputs: dict[str, list[Any]],
    attrs: dict[str, Any] | None = None,
    dtype: Any = None,
    extra_outputs: dict[str, Any] | None = None,
) -> Any:
    """Appends the OpDesc Paddle 2.x wrote, for functions that no longer trace to legacy."""
    helper = paddle.base.layer_helper.LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(dtype or inputs["X"][0].dtype)
    outputs = {"Out": [out]}
    for slot, slot_dtype in (extra_outputs or {}).items():
        outputs[slot] = [helper.create_variable_for_type_inference(slot_dtype)]
    helper.append_op(type=op_type, inputs=inputs, outputs=outputs, attrs=dict(attrs or {}))
    return out


def unary(
    fn: Callable[[Any], Any], shape: Sequence[int] = (-1, 3, -1), dtype: str = "float32"
) -> Build:
    def build() -> tuple[list[Any], list[Any]]:
        x = data(shape, dtype)
        return [x], [fn(x)]

    return build


def op(op_type: str, attrs: dict[str, Any] | None = None, **kwargs: Any) -> Build:
    return unary(lambda x: legacy(op_type, {"X": [x]}, attrs), **kwargs)


def bfloat16(op_type: str, attrs: dict[str, Any] | None = None) -> Build:
    """X float32 -> bfloat16 -> op -> float32: feeds cannot be bfloat16, computed values can."""

    def fn(x: Any) -> Any:
        half = paddle.cast(x, "bfloat16")
        return paddle.cast(legacy(op_type, {"X": [half]}, attrs), "float32")

    return unary(fn)


def _dropout_with_seed() -> tuple[list[Any], list[Any]]:
    x, seed = data([-1, 4]), data([1], "int32", "seed")
    attrs = {"dropout_prob": 0.2, "is_test": True, "fix_seed": True, "seed": 3}
    out = legacy("dropout", {"X": [x], "Seed": [seed]}, attrs, extra_outputs={"Mask": "uint8"})
    return [x, seed], [out]


# "<op type>/<variant>" -> build; layers are made inside the build so their parameters land in
# its programs. The op type must appear in the saved program.
BUILDS: dict[str, Build] = {
    "relu/functional": unary(F.relu),
    "relu/0-D": unary(F.relu, shape=()),
    "relu/bfloat16": bfloat16("relu"),
    "relu6/bfloat16": bfloat16("relu6"),
    "leaky_relu/bfloat16": bfloat16("leaky_relu", {"alpha": 0.1}),
    "elu/bfloat16": bfloat16("elu", {"alpha": 0.5}),
    "gelu/bfloat16": bfloat16("gelu", {"approximate": False}),
    "gelu/bfloat16_tanh": bfloat16("gelu", {"approximate": True}),
    "sigmoid/bfloat16": bfloat16("sigmoid"),
    "hard_swish/bfloat16": bfloat16("hard_swish"),
    "tanh/bfloat16": bfloat16("tanh"),
    "softmax/bfloat16": bfloat16("softmax", {"axis": 1}),
    "log_softmax/bfloat16": bfloat16("log_softmax", {"axis": -1}),
    "relu6/functional": unary(F.relu6),
    "leaky_relu/alpha": unary(lambda x: F.leaky_relu(x, 0.1)),
    "leaky_relu/layer": unary(lambda x: paddle.nn.LeakyReLU()(x)),
    "elu/alpha": unary(lambda x: F.elu(x, 0.5)),
    "gelu/exact": op("gelu", {"approximate": False}),
    "gelu/tanh": op("gelu", {"approximate": True}),
    "gelu/float64": op("gelu", {"approximate": False}, dtype="float64"),
    "gelu/float64_tanh": op("gelu", {"approximate": True}, dtype="float64"),
    "elu/float64": op("elu", {"alpha": 0.7}, dtype="float64"),
    "silu/layer": unary(lambda x: paddle.nn.Silu()(x)),
    "swish/functional": unary(F.swish),
    "sigmoid/legacy": op("sigmoid"),
    "hard_sigmoid/functional": unary(F.hardsigmoid),
    "hard_sigmoid/defaults": op("hard_sigmoid"),
    "hard_swish/layer": unary(lambda x: paddle.nn.Hardswish()(x)),
    "hard_swish/functional": unary(F.hardswish, shape=(-1, 8, -1, -1)),
    "tanh/legacy": op("tanh"),
    "tanh/0-D": op("tanh", shape=()),
    "softplus/beta": op("softplus", {"beta": 2.0, "threshold": 10.0}),
    "softplus/defaults": op("softplus"),
    "softplus/negative_beta": op("softplus", {"beta": -1.5, "threshold": 2.0}),
    "softplus/float64": op("softplus", {"beta": 3.0, "threshold": 4.0}, dtype="float64"),
    "softmax/default_axis": unary(F.softmax),
    "softmax/axis1": unary(lambda x: F.softmax(x, axis=1)),
    "softmax/0-D": unary(F.softmax, shape=()),
    "softmax/batch_axis": unary(lambda x: F.softmax(x, axis=0)),
    "softmax/float64": unary(lambda x: F.softmax(x, axis=-3), dtype="float64"),
    "log_softmax/axis": unary(lambda x: F.log_softmax(x, axis=-2)),
    "log_softmax/0-D": op("log_softmax", {"axis": -1}, shape=()),
    "prelu/channel": unary(lambda x: paddle.nn.PReLU(3)(x), shape=(-1, 3, -1, -1)),
    "prelu/all": unary(lambda x: paddle.nn.PReLU()(x), shape=(-1, 3, 5)),
    "prelu/nhwc": unary(lambda x: paddle.nn.PReLU(3, data_format="NHWC")(x), shape=(-1, -1, -1, 3)),
    "prelu/static_channel": unary(lambda x: paddle.static.nn.prelu(x, "channel"), shape=(-1, 3, 4)),
    "prelu/element": unary(lambda x: paddle.static.nn.prelu(x, "element"), shape=(-1, 3, 4)),
    "prelu/0-D": unary(lambda x: paddle.nn.PReLU()(x), shape=()),
    "hard_swish/float64": op("hard_swish", dtype="float64"),
    "dropout/layer": unary(lambda x: paddle.nn.Dropout(0.3)(x)),
    "dropout/downscale": unary(
        lambda x: F.dropout(x, 0.3, training=False, mode="downscale_in_infer")
    ),
    "dropout/seed": _dropout_with_seed,
    "dropout/0-D": unary(lambda x: paddle.nn.Dropout(0.5)(x), shape=()),
}


# Feeds Paddle's kernels need beyond random normals, by build name.
FEEDS: Final[dict[str, Adjust]] = {
    "softplus/defaults": lambda f: {"x": f["x"] * 15},  # both sides of threshold 20
    "softplus/negative_beta": lambda f: {"x": f["x"] * 3},
    "softplus/float64": lambda f: {"x": f["x"] * 3},
}

CASES: Final = {
    name: Case(name.split("/")[0], build, adjust=FEEDS.get(name), random_params=True)
    for name, build in sorted(BUILDS.items())
}
