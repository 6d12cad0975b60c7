"""Activation ops built by real Paddle: the attrs it writes are accepted, graphgate's dims match."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from graph_proto import framework_pb2 as pb
from tests.conformance.paddle_util import build_and_save, dims_differences, paddle
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle

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
    "relu6/functional": unary(F.relu6),
    "leaky_relu/alpha": unary(lambda x: F.leaky_relu(x, 0.1)),
    "leaky_relu/layer": unary(lambda x: paddle.nn.LeakyReLU()(x)),
    "elu/alpha": unary(lambda x: F.elu(x, 0.5)),
    "gelu/exact": op("gelu", {"approximate": False}),
    "gelu/tanh": op("gelu", {"approximate": True}),
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
    "softmax/default_axis": unary(F.softmax),
    "softmax/axis1": unary(lambda x: F.softmax(x, axis=1)),
    "softmax/0-D": unary(F.softmax, shape=()),
    "log_softmax/axis": unary(lambda x: F.log_softmax(x, axis=-2)),
    "prelu/channel": unary(lambda x: paddle.nn.PReLU(3)(x), shape=(-1, 3, -1, -1)),
    "prelu/all": unary(lambda x: paddle.nn.PReLU()(x), shape=(-1, 3, 5)),
    "prelu/nhwc": unary(lambda x: paddle.nn.PReLU(3, data_format="NHWC")(x), shape=(-1, -1, -1, 3)),
    "prelu/static_channel": unary(lambda x: paddle.static.nn.prelu(x, "channel"), shape=(-1, 3, 4)),
    "prelu/element": unary(lambda x: paddle.static.nn.prelu(x, "element"), shape=(-1, 3, 4)),
    "prelu/0-D": unary(lambda x: paddle.nn.PReLU()(x), shape=()),
    "dropout/layer": unary(lambda x: paddle.nn.Dropout(0.3)(x)),
    "dropout/downscale": unary(
        lambda x: F.dropout(x, 0.3, training=False, mode="downscale_in_infer")
    ),
    "dropout/seed": _dropout_with_seed,
    "dropout/0-D": unary(lambda x: paddle.nn.Dropout(0.5)(x), shape=()),
}


def op_types(program: bytes) -> set[str]:
    return {o.type for o in pb.ProgramDesc.FromString(program).blocks[0].ops}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_dims_match_paddle(name: str) -> None:
    saved = build_and_save(BUILDS[name])
    assert name.split("/")[0] in op_types(saved.program)
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        # Paddle 3 writes these but computes with the defaults; graphgate refuses the ambiguity.
        (op("hard_swish", {"threshold": 4.0}), "threshold: expected 6.0"),
        (op("softplus", {"beta": 0.0}), "beta: expected a finite non-zero number, got 0.0"),
    ],
)
def test_rejects_bad_attrs_paddle_writes(build: Build, fragment: str) -> None:
    saved = build_and_save(build)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == [Code.ATTR_VALUE]
    assert fragment in str(info.value)
