"""Whole models built with real Paddle and saved as legacy inference programs.

Every function returns a paddle_util.Saved, built once per process (functools.cache). The batch
dim is always -1. Building runs only the startup program (parameter initialisation); for numeric
parity, `calibrated(name)` conditions a model's parameters like a trained network's (see
he_scale_convolutions, calibrate_batch_norm and normalize_convolutions). Inputs are as small as
each architecture allows, which keeps numeric runs cheap. Minimum sizes:
  - googlenet: its two auxiliary heads flatten a 5x5/3 average pool of the 4a/4d features into a
    fixed Linear(1152 = 128*3*3), so those features must be 11..13 px: input >= 189.
  - AlexNet: fc6 is a fixed Linear(9216 = 256*6*6) with no adaptive pool: input 223 or 224.
  - LeNet: fc is a fixed Linear(400 = 16*5*5) on a 1-channel image: input 28.
  - squeezenet1_0: its third 3x3/2 max pool must see at least 3 px: input >= 35. (At 32 that
    pool sees 2 px; Paddle records an output of 1 and clips the window at run time, graphgate
    refuses a window larger than its padded input.)
  - mobilenet_v1: 64, for numeric parity. It has no shortcut: its 27 convolution, batch_norm
    and ReLU stages all add rounding on one path. At 32 px the last seven run on 2x2 and 1x1
    maps and the global pool averages a single position, so each output keeps that rounding
    whole: over 16 random inputs graphgate and Paddle then differ by up to 1.13x the parity
    tolerance (and Paddle from itself by 0.78x when its input moves by one ulp); at 64 px by
    at most 0.41x.
The others end in an adaptive average pool and take 32x32, where every window fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache
from typing import Any, Final

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.pdiparams import array, read_params, write_params
from graph_proto.types import DType
from tests.conformance import paddle_util
from tests.conformance.paddle_util import Saved, paddle, random_feeds
from validator import validate

_IMAGE = 32
# Calibration feeds have their own seed: parity tests (random_feeds) compare on other data.
# Per-channel statistics need 128 images where feature maps are 1x1; one RMS per convolution
# needs few.
BATCH_NORM_CALIBRATION_BATCH: Final = 128
CONV_CALIBRATION_BATCH: Final = 8
CALIBRATION_SEED: Final = 20261201
# Scale of a batch_norm that ends a residual branch (its output is added to the shortcut).
RESIDUAL_SCALE: Final = 0.5
# Bias of every other batch_norm: its output has mean BATCH_NORM_SHIFT and unit variance, so a
# ReLU after it keeps 84% of its input (see calibrate_batch_norm).
BATCH_NORM_SHIFT: Final = 1.0
_CONVS: Final = frozenset({"conv2d", "depthwise_conv2d"})


def _image_model(make: Callable[[], Any], shape: list[int]) -> Saved:
    """Builds `make()` in eval mode on a float32 feed `image` of `shape`; fetches every output."""
    with paddle_util.building() as (main, startup):
        image = paddle.static.data("image", shape, "float32")
        net = make()
        net.eval()
        out = net(image)
        fetches = list(out) if isinstance(out, (tuple, list)) else [out]
    return paddle_util.save(main, startup, [image], fetches)


@cache
def vision(name: str, size: int = _IMAGE, channels: int = 3) -> Saved:
    """paddle.vision.models.<name>() on a [-1, channels, size, size] image (cached); benchmarks
    build their full-size models with it too."""
    return _image_model(getattr(paddle.vision.models, name), [-1, channels, size, size])


def resnet18() -> Saved:
    return vision("resnet18")


def resnet50(size: int = _IMAGE) -> Saved:
    """ResNet-50; `size=224` gives the full-size model (for benchmarks)."""
    return vision("resnet50", size)


def mobilenet_v1() -> Saved:
    return vision("mobilenet_v1", 64)


def mobilenet_v2() -> Saved:
    return vision("mobilenet_v2")


@cache
def mobilenet_v2_dynamic() -> Saved:
    """MobileNetV2 on a fully dynamic image [-1, 3, -1, -1]: -1 spatial dims all the way down."""
    return _image_model(paddle.vision.models.mobilenet_v2, [-1, 3, -1, -1])


def mobilenet_v3_small() -> Saved:
    return vision("mobilenet_v3_small")


def mobilenet_v3_large() -> Saved:
    return vision("mobilenet_v3_large")


def vgg11() -> Saved:
    return vision("vgg11")


def squeezenet1_0() -> Saved:
    return vision("squeezenet1_0", 35)


def squeezenet1_1() -> Saved:
    return vision("squeezenet1_1")


def shufflenet_v2_x0_25() -> Saved:
    return vision("shufflenet_v2_x0_25")


def shufflenet_v2_swish() -> Saved:
    return vision("shufflenet_v2_swish")


def densenet121() -> Saved:
    return vision("densenet121")


def googlenet() -> Saved:
    """GoogLeNet with its two auxiliary heads: three fetches (out, aux1, aux2)."""
    return vision("googlenet", 189)


def lenet() -> Saved:
    return vision("LeNet", 28, 1)


def alexnet() -> Saved:
    return vision("AlexNet", 224)


def transformer(activation: str, **sizes: int) -> Saved:
    """Embedding(vocab, d_model) over int64 ids [-1, -1] then a TransformerEncoder; the defaults
    of `sizes` (transformer_network's keywords) are the tests' size (2 layers, d_model 16,
    2 heads), larger ones are for benchmarks."""
    paddle_util.install_legacy_compat()  # matmul and gelu only trace to PIR in Paddle 3.3.1
    return paddle_util.build_and_save(transformer_network(activation, **sizes))


def transformer_network(
    activation: str,
    *,
    d_model: int = 16,
    nhead: int = 2,
    dim_feedforward: int = 32,
    num_layers: int = 2,
    vocab: int = 100,
) -> Callable[[], tuple[list[Any], list[Any]]]:
    """What `transformer` saves, as a builder (feeds, fetches) to trace under either program
    format (test_pir saves it as PIR)."""

    def build() -> tuple[list[Any], list[Any]]:
        ids = paddle.static.data("ids", [-1, -1], "int64")
        embedding = paddle.nn.Embedding(vocab, d_model)
        layer = paddle.nn.TransformerEncoderLayer(
            d_model=d_model,
            nhead=nhead,
            dim_feedforward=dim_feedforward,
            dropout=0.1,
            activation=activation,
        )
        encoder = paddle.nn.TransformerEncoder(layer, num_layers=num_layers)
        embedding.eval()
        encoder.eval()
        return [ids], [encoder(embedding(ids))]

    return build


@cache
def transformer_relu() -> Saved:
    return transformer("relu")


@cache
def transformer_gelu() -> Saved:
    return transformer("gelu")


@cache
def calibrated(name: str) -> Saved:
    """MODELS[name] conditioned like a trained network, for numeric parity (cached per process):
    its convolutions at He scale and its batch_norm statistics calibrated, or, without
    batch_norm, its convolutions scaled to unit output RMS. A model with neither (the
    transformers) is returned as it is."""
    saved = MODELS[name]()
    types = {op.type for op in pb.ProgramDesc.FromString(saved.program).blocks[0].ops}
    if "batch_norm" in types:
        saved = he_scale_convolutions(saved)
        return calibrate_batch_norm(saved, calibration_feeds(saved, BATCH_NORM_CALIBRATION_BATCH))
    if types & _CONVS:
        return normalize_convolutions(saved, calibration_feeds(saved, CONV_CALIBRATION_BATCH))
    return saved


def calibration_feeds(saved: Saved, batch: int, size: int = _IMAGE) -> dict[str, np.ndarray]:
    """Standard-normal float32 feeds: a -1 dim becomes `batch` (axis 0) or `size`."""
    validated = validate(saved.program, saved.params)
    for spec in validated.inputs:
        assert spec.dtype == DType.FP32, f"{spec.name}: expected a float32 feed"
    return random_feeds(validated, batch=batch, dynamic=size, seed=CALIBRATION_SEED)


def calibrate_batch_norm(
    saved: Saved,
    feeds: Mapping[str, np.ndarray],
    *,
    residual_scale: float = RESIDUAL_SCALE,
    shift: float = BATCH_NORM_SHIFT,
) -> Saved:
    """`saved` with every batch_norm's Mean and Variance set to the per-channel statistics of its
    input on `feeds`, as training leaves them, and its Scale and Bias set as below; the program
    bytes are unchanged.

    Paddle's default init leaves Mean 0 and Variance 1, so activations grow or vanish with depth
    (resnet50 logits near 1000, mobilenet_v1 ones near 1e-18). One Paddle run in which every
    batch_norm normalises by its batch's own statistics (and applies the Scale and Bias set
    here) gives, at each of them, exactly the input it sees once all the earlier ones are
    calibrated.

    Bias `shift` (1): with Bias 0, a calibrated batch_norm followed by ReLU keeps half of a
    perturbation's energy but only (1 - 1/pi) / 2 of its input's variance (the ReLU's output
    mean is removed by the next batch_norm): every such stage multiplies relative errors, float32
    rounding included, by sqrt(pi / (pi - 1)) = 1.21 (measured: 1.20 per stage in
    mobilenet_v1), 170x over mobilenet_v1's 27, so that Paddle itself moved by 3.7x the parity
    tolerance when its input moved by one ulp. With Bias 1 the ReLU keeps 84% of its input and
    a stage multiplies them by 1.06 (measured 1.07). (A larger Bias does no better: the ReLU's
    output mean then dominates its variance, and the next mean subtraction cancels more.)

    A batch_norm whose output is added to a shortcut gets Scale `residual_scale` and Bias 0
    instead: trained ResNets have small last-in-branch scales (zero-init-residual training
    starts them at 0). With Scale 1 the residual streams amplify rounding: resnet50 then differs
    from Paddle by ~30x the parity tolerance, and so does Paddle from itself when the input
    moves by one ulp. That Scale is set after the statistics are taken, so the batch_norms
    downstream normalise by a slightly larger variance than the stream has, which keeps it from
    growing with depth (set before, resnet50 differs from Paddle by 2.5x the tolerance).
    """
    assert saved.params is not None
    program = pb.ProgramDesc.FromString(saved.program)
    norms = [op for op in program.blocks[0].ops if op.type == "batch_norm"]
    added = {
        name
        for op in program.blocks[0].ops
        if op.type == "elementwise_add"
        for slot in op.inputs
        for name in slot.arguments
    }
    ends_branch = {_arg(op.outputs, "Y") for op in norms} & added
    params = _params(program, saved.params)
    shifts = {
        _arg(op.inputs, "Bias"): np.full(params[_arg(op.inputs, "Bias")][1].shape, shift)
        for op in norms
        if _arg(op.outputs, "Y") not in ends_branch
    }
    saved = replace(saved, params=_replace_params(program, saved.params, shifts))
    with paddle_util.loaded(saved) as (main, _, exe):
        block = main.global_block()
        inputs = [_use_batch_statistics(block, op) for op in block.ops if op.type == "batch_norm"]
        values = exe.run(main, feed=dict(feeds), fetch_list=inputs)
    new: dict[str, np.ndarray] = {}
    for op, value in zip(norms, values, strict=True):
        channel = value.ndim - 1 if _attr(op, "data_layout").s == "NHWC" else 1
        axes = tuple(a for a in range(value.ndim) if a != channel)
        new[_arg(op.inputs, "Mean")] = value.mean(axis=axes, dtype=np.float64)
        new[_arg(op.inputs, "Variance")] = value.var(axis=axes, dtype=np.float64)
        if _arg(op.outputs, "Y") in ends_branch:
            new[_arg(op.inputs, "Scale")] = np.full(value.shape[channel], residual_scale)
    assert saved.params is not None
    return replace(saved, params=_replace_params(program, saved.params, new))


def he_scale_convolutions(saved: Saved) -> Saved:
    """`saved` with each convolution's filter rescaled to the standard deviation of He init,
    sqrt(2 / fan_in) with fan_in = its input channels per group * kernel size.

    Paddle 3.3.1's default Conv2D init, Normal(0, sqrt(2 / (in_channels * kernel size))),
    ignores groups: a depthwise [C, 1, 3, 3] filter gets std sqrt(2 / 9C), and its outputs
    variances that batch_norm's epsilon (1e-5) shrinks or wipes out. In mobilenet_v2, 3.3% of
    the batch_norm channels have a variance below epsilon (down to 4e-12) and carry almost
    nothing on; at He scale 0.1% do.
    """
    assert saved.params is not None
    program = pb.ProgramDesc.FromString(saved.program)
    params = _params(program, saved.params)
    new = {}
    for op in program.blocks[0].ops:
        if op.type in _CONVS:
            name = _arg(op.inputs, "Filter")
            filters = params[name][1].astype(np.float64)
            new[name] = filters * (np.sqrt(2 / filters[0].size) / filters.std())
    return replace(saved, params=_replace_params(program, saved.params, new))


def normalize_convolutions(saved: Saved, feeds: Mapping[str, np.ndarray]) -> Saved:
    """`saved` with each convolution's filter divided by the RMS of its output on `feeds`, in
    order (a data-dependent init, as LSUV), so that activations stay near unit scale with depth.

    googlenet has no batch_norm: at Paddle's init its logits reach ~100, where one float32 ulp
    is 0.8x the parity atol. One run in which every convolution's output is divided by its RMS
    (ops inserted after it) gives each RMS as the rescaled model sees it; biases are kept.
    """
    assert saved.params is not None
    program = pb.ProgramDesc.FromString(saved.program)
    filters = [_arg(op.inputs, "Filter") for op in program.blocks[0].ops if op.type in _CONVS]
    with paddle_util.loaded(saved) as (main, _, exe):
        block = main.global_block()
        names = [_divide_by_rms(block, op) for op in list(block.ops) if op.type in _CONVS]
        values = exe.run(main, feed=dict(feeds), fetch_list=names)
    params = _params(program, saved.params)
    new = {name: params[name][1] / float(rms) for name, rms in zip(filters, values, strict=True)}
    return replace(saved, params=_replace_params(program, saved.params, new))


def fetch(saved: Saved, feeds: Mapping[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
    """Runs the saved model with Paddle's Executor and returns the named vars (any var of block 0)."""
    with paddle_util.loaded(saved) as (main, _, exe):
        return list(exe.run(main, feed=dict(feeds), fetch_list=names))


def _use_batch_statistics(block: Any, op: Any) -> str:
    """Switches a batch_norm to Paddle's training mode; returns its input's name."""
    op._set_attr("is_test", False)
    op._set_attr("use_global_stats", False)
    # NOTE: in training mode Paddle's CPU kernel writes ReserveSpace, an output that
    # save_inference_model prunes; without it the kernel fails on a null tensor.
    reserve = block.create_var(name=op.output("Y")[0] + ".reserve_space", dtype="float32")
    op.desc.set_output("ReserveSpace", [reserve.name])
    return str(op.input("X")[0])


def _divide_by_rms(block: Any, op: Any) -> str:
    """Inserts out / sqrt(mean(out ** 2)) after a convolution and makes every later op read it;
    returns the name of the RMS."""
    index = list(block.ops).index(op)
    out = op.output("Output")[0]
    square, mean, rms, scaled = (
        block.create_var(name=f"{out}.{suffix}", dtype="float32")
        for suffix in ("square", "mean_square", "rms", "unit_rms")
    )
    inserted = [
        ("square", {"X": [out]}, {"Out": [square]}, {}),
        ("reduce_mean", {"X": [square]}, {"Out": [mean]}, {"reduce_all": True, "dim": [0]}),
        ("sqrt", {"X": [mean]}, {"Out": [rms]}, {}),
        ("elementwise_div", {"X": [out], "Y": [rms]}, {"Out": [scaled]}, {"axis": -1}),
    ]
    for offset, (kind, inputs, outputs, attrs) in enumerate(inserted, start=1):
        block._insert_op(index + offset, type=kind, inputs=inputs, outputs=outputs, attrs=attrs)
    for later in list(block.ops)[index + 1 + len(inserted) :]:
        later._rename_input(out, scaled.name)
    return str(rms.name)


def _params(program: pb.ProgramDesc, params: bytes) -> dict[str, tuple[DType, np.ndarray]]:
    """name -> (dtype, read-only array) of every tensor in the .pdiparams (sorted by name)."""
    names = sorted(
        var.name
        for var in program.blocks[0].vars
        if var.persistable and var.type.type == pb.VarType.DENSE_TENSOR
    )
    found = {}
    for name, tensor in zip(names, read_params(params, len(names)), strict=True):
        assert tensor.dtype is not None, name
        found[name] = (tensor.dtype, array(params, tensor))
    return found


def _replace_params(program: pb.ProgramDesc, params: bytes, new: Mapping[str, np.ndarray]) -> bytes:
    """The .pdiparams with the tensors named in `new` replaced (their dtype and dims kept)."""
    tensors: list[tuple[DType, np.ndarray]] = []
    for name, (dtype, value) in _params(program, params).items():
        replaced = new.get(name)
        if replaced is not None:
            value = np.asarray(replaced, dtype=value.dtype).reshape(value.shape)
        tensors.append((dtype, value))
    return write_params(tensors)


def _arg(slots: Any, parameter: str) -> str:
    (name,) = next(s.arguments for s in slots if s.parameter == parameter)
    return str(name)


def _attr(op: pb.OpDesc, name: str) -> pb.OpDesc.Attr:
    return next(a for a in op.attrs if a.name == name)


MODELS: dict[str, Callable[[], Saved]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v2_dynamic": mobilenet_v2_dynamic,
    "mobilenet_v3_small": mobilenet_v3_small,
    "mobilenet_v3_large": mobilenet_v3_large,
    "vgg11": vgg11,
    "squeezenet1_0": squeezenet1_0,
    "squeezenet1_1": squeezenet1_1,
    "shufflenet_v2_x0_25": shufflenet_v2_x0_25,
    "shufflenet_v2_swish": shufflenet_v2_swish,
    "densenet121": densenet121,
    "googlenet": googlenet,
    "lenet": lenet,
    "alexnet": alexnet,
    "transformer_relu": transformer_relu,
    "transformer_gelu": transformer_gelu,
}
