"""Whole models built with real Paddle and saved as legacy inference programs.

Every function returns a paddle_util.Saved, built once per process (functools.cache). The batch
dim is always -1. Inputs are as small as each architecture allows: nothing is executed here but
the startup program (parameter initialisation), so the size only matters for graphgate's budget
arithmetic, but small inputs keep later numeric runs cheap too. Minimum sizes:
  - googlenet: its two auxiliary heads flatten a 5x5/3 average pool of the 4a/4d features into a
    fixed Linear(1152 = 128*3*3), so those features must be 11..13 px: input >= 189.
  - AlexNet: fc6 is a fixed Linear(9216 = 256*6*6) with no adaptive pool: input 223 or 224.
  - LeNet: fc is a fixed Linear(400 = 16*5*5) on a 1-channel image: input 28.
  - squeezenet1_0: its third 3x3/2 max pool must see at least 3 px: input >= 35. (At 32 that
    pool sees 2 px; Paddle records an output of 1 and clips the window at run time, graphgate
    refuses a window larger than its padded input.)
The others end in an adaptive average pool and take 32x32, where every window fits.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from tests.conformance import paddle_util
from tests.conformance.paddle_util import Saved, paddle

_IMAGE = 32


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
def _vision(name: str, size: int = _IMAGE, channels: int = 3) -> Saved:
    """paddle.vision.models.<name>() on a [-1, channels, size, size] image (cached)."""
    return _image_model(getattr(paddle.vision.models, name), [-1, channels, size, size])


def resnet18() -> Saved:
    return _vision("resnet18")


def resnet50(size: int = _IMAGE) -> Saved:
    """ResNet-50; `size=224` gives the full-size model (for benchmarks)."""
    return _vision("resnet50", size)


def mobilenet_v1() -> Saved:
    return _vision("mobilenet_v1")


def mobilenet_v2() -> Saved:
    return _vision("mobilenet_v2")


@cache
def mobilenet_v2_dynamic() -> Saved:
    """MobileNetV2 on a fully dynamic image [-1, 3, -1, -1]: -1 spatial dims all the way down."""
    return _image_model(paddle.vision.models.mobilenet_v2, [-1, 3, -1, -1])


def mobilenet_v3_small() -> Saved:
    return _vision("mobilenet_v3_small")


def mobilenet_v3_large() -> Saved:
    return _vision("mobilenet_v3_large")


def vgg11() -> Saved:
    return _vision("vgg11")


def squeezenet1_0() -> Saved:
    return _vision("squeezenet1_0", 35)


def squeezenet1_1() -> Saved:
    return _vision("squeezenet1_1")


def shufflenet_v2_x0_25() -> Saved:
    return _vision("shufflenet_v2_x0_25")


def shufflenet_v2_swish() -> Saved:
    return _vision("shufflenet_v2_swish")


def densenet121() -> Saved:
    return _vision("densenet121")


def googlenet() -> Saved:
    """GoogLeNet with its two auxiliary heads: three fetches (out, aux1, aux2)."""
    return _vision("googlenet", 189)


def lenet() -> Saved:
    return _vision("LeNet", 28, 1)


def alexnet() -> Saved:
    return _vision("AlexNet", 224)


def _transformer(activation: str) -> Saved:
    """Embedding over int64 ids [-1, -1] then a 2-layer TransformerEncoder (d_model 16, 2 heads)."""
    paddle_util.install_legacy_compat()  # matmul and gelu only trace to PIR in Paddle 3.3.1
    with paddle_util.building() as (main, startup):
        ids = paddle.static.data("ids", [-1, -1], "int64")
        embedding = paddle.nn.Embedding(100, 16)
        layer = paddle.nn.TransformerEncoderLayer(
            d_model=16, nhead=2, dim_feedforward=32, dropout=0.1, activation=activation
        )
        encoder = paddle.nn.TransformerEncoder(layer, num_layers=2)
        embedding.eval()
        encoder.eval()
        out = encoder(embedding(ids))
    return paddle_util.save(main, startup, [ids], [out])


@cache
def transformer_relu() -> Saved:
    return _transformer("relu")


@cache
def transformer_gelu() -> Saved:
    return _transformer("gelu")


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
