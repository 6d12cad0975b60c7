"""Ops the Paddle ecosystem's models need: meshgrid, roll, unfold, linear_interp_v2,
pad, bitwise_not, masked_fill and set_value, built by real Paddle 3.3.1 as legacy programs.

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's).

elementwise_floordiv is in families/elementwise.py."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from tests.conformance import legacy_compat
from tests.conformance.op_cases import Case, Feeds, Size, program
from tests.conformance.paddle_util import paddle

legacy_compat.install()  # paddle.roll traces to _C_ops only in 3.3.1
F = paddle.nn.functional
_SETITEM: Final[Any] = vars(paddle.static)["setitem"]  # x[index] = v in a static program


def _old_pad(x: Any, paddings: list[int], value: float) -> Any:
    """The old `pad` op (paddle.nn.functional.pad now writes pad3d): as Paddle 2.x wrote it."""
    helper = paddle.base.layer_helper.LayerHelper("pad")
    out = helper.create_variable_for_type_inference(x.dtype)
    attrs = {"paddings": paddings, "pad_value": value}
    helper.append_op(type="pad", inputs={"X": [x]}, outputs={"Out": [out]}, attrs=attrs)
    return out


def _setitem(x: Any, index: Any, value: Any) -> Any:
    """x[index] = value as a static program writes it (set_value into a new var)."""
    return _SETITEM(x * 1, index, value)


def _set_value_in_place(x: Any, **attrs: Any) -> Any:
    """set_value as Paddle 2.x wrote it: over its Input (test_set_value.py turns `values` into
    the typed lists 2.x wrote, which Paddle 3.3.1 no longer reads)."""
    y = x * 1
    helper = paddle.base.layer_helper.LayerHelper("set_value")
    helper.append_op(type="set_value", inputs={"Input": [y]}, outputs={"Out": [y]}, attrs=attrs)
    return y


def _swin_mask(x: Any) -> Any:
    """Swin's shifted-window attention mask: regions of a zero image numbered by set_value."""
    mask = paddle.zeros([1, 6, 6, 1], "float32")
    count = 0
    for h in (slice(0, -4), slice(-4, -2), slice(-2, None)):
        for w in (slice(0, -4), slice(-4, -2), slice(-2, None)):
            mask = _SETITEM(mask, (slice(None), h, w, slice(None)), float(count))
            count += 1
    return x + mask


def _rexnet_add(x: Any, shortcut: Any) -> Any:
    """ReXNet's residual into the first channels: out[:, 0:c] += x."""
    out = x * 2
    return _SETITEM(out, (slice(None), slice(0, 2)), out[:, 0:2] + shortcut)


def _tnt_add(patches: Any, pixels: Any) -> Any:
    """TNT's patch update after the class token: patch_embed[:, 1:] = patch_embed[:, 1:] + proj."""
    return _SETITEM(patches * 1, (slice(None), slice(1, None)), patches[:, 1:] + pixels)


def _dynamic_end(x: Any) -> Any:
    """An end only the run time knows (EndsTensorList) on a dim only the run time knows."""
    return _setitem(x, (slice(None), slice(0, paddle.shape(x)[1] - 1)), 1.0)


def _mask_half(feeds: Feeds) -> Feeds:
    rng = np.random.default_rng(7)
    return {name: rng.random(v.shape) > 0.5 for name, v in feeds.items() if v.dtype == bool}


def _signed_ints(feeds: Feeds) -> Feeds:
    rng = np.random.default_rng(8)
    return {n: rng.integers(-100, 100, v.shape).astype(v.dtype) for n, v in feeds.items()}


CASES: Final = {
    "meshgrid": Case(
        "meshgrid",
        program(lambda x, y: paddle.meshgrid(x, y), ([3], "float32"), ([-1], "float32")),
    ),
    "meshgrid_three_int": Case(
        "meshgrid",
        program(lambda x, y, z: paddle.meshgrid(x, y, z), ([2], "int64"), ([4], "int64"), ([-1], "int64")),
    ),
    "roll_axes": Case("roll", program(lambda x: paddle.roll(x, [1, -2], [1, 2]), ([-1, 3, 4], "float32"))),
    "roll_flat": Case("roll", program(lambda x: paddle.roll(x, 5), ([-1, 3], "int64"))),
    "roll_batch_axis": Case("roll", program(lambda x: paddle.roll(x, -7, 0), ([-1, 2], "float32"))),
    "unfold": Case("unfold", program(lambda x: F.unfold(x, 3), ([-1, 2, 5, 6], "float32"))),
    "unfold_strided_padded": Case(
        "unfold",
        program(
            lambda x: F.unfold(x, [2, 3], strides=[2, 1], paddings=[1, 0, 0, 2], dilations=[1, 2]),
            ([-1, 3, 6, 7], "float32"),
        ),
    ),
    "linear_interp": Case(
        "linear_interp_v2",
        program(lambda x: F.interpolate(x, size=[9], mode="linear", data_format="NCW"), ([-1, 3, 5], "float32")),
    ),
    "linear_interp_align_corners": Case(
        "linear_interp_v2",
        program(
            lambda x: F.interpolate(x, scale_factor=1.7, mode="linear", align_corners=True, data_format="NCW"),
            ([-1, 2, 6], "float32"),
        ),
    ),
    "linear_interp_align_mode_1": Case(
        "linear_interp_v2",
        program(
            lambda x: F.interpolate(x, size=[4], mode="linear", align_mode=1, data_format="NCW"),
            ([-1, 2, 7], "float32"),
        ),
    ),
    "pad_old": Case("pad", program(lambda x: _old_pad(x, [0, 0, 1, 2, 3, 0], 1.5), ([-1, 3, 4], "float32"))),
    "pad_old_int": Case("pad", program(lambda x: _old_pad(x, [1, 0, 0, 2], -3.0), ([-1, 3], "int64"))),
    "bitwise_not_int32": Case(
        "bitwise_not", program(paddle.bitwise_not, ([-1, 3], "int32")), adjust=_signed_ints
    ),
    "bitwise_not_bool": Case("bitwise_not", program(paddle.bitwise_not, ([-1, 3], "bool"))),
    "masked_fill": Case(
        "masked_fill",
        program(lambda x, m: paddle.masked_fill(x, m, -1e9), ([-1, 1, 4, 4], "float32"), ([-1, 1, 1, 4], "bool")),
        adjust=_mask_half,
    ),
    "masked_fill_tensor_value": Case(
        "masked_fill",
        program(lambda x, m, v: paddle.masked_fill(x, m, v), ([-1, 3], "float32"), ([3], "bool"), ([1], "float32")),
        adjust=_mask_half,
        sizes=(Size(1, 2, 0), Size(4, 2, 1)),
    ),
    "set_value_tensor": Case(
        "set_value",
        program(lambda x, v: _setitem(x, (slice(None), slice(1, 3)), v), ([-1, 4, 5], "float32"), ([2, 5], "float32")),
    ),
    "set_value_scalar_steps_decrease": Case(
        "set_value", program(lambda x: _setitem(x, (slice(None), -1, slice(None, None, 2)), 3.5), ([-1, 4, 5], "float32")),
    ),
    "set_value_negative_steps": Case(
        "set_value",
        program(lambda x: _setitem(x, (slice(None), slice(None, None, -2), slice(4, 0, -3)), 9), ([-1, 4, 5], "int64")),
    ),
    "set_value_negative_bounds": Case(
        "set_value", program(lambda x: _setitem(x, (slice(-3, -1), slice(-100, -2)), -1.0), ([4, 5], "float32")),
    ),
    "set_value_values_list": Case(
        "set_value",
        program(lambda x: _setitem(x, (slice(None), 0), np.arange(5, dtype="float32")), ([-1, 3, 5], "float32")),
    ),
    "set_value_none_axes": Case(
        "set_value", program(lambda x: _setitem(x, (Ellipsis, None, slice(4, 0, -2)), 7.0), ([-1, 2, 6], "float32")),
    ),
    "set_value_dynamic_end": Case("set_value", program(_dynamic_end, ([-1, -1, 3], "float32"))),
    "set_value_empty_slice": Case(
        "set_value", program(lambda x: _setitem(x, (slice(None), slice(3, 1)), 5.0), ([-1, 4], "float32")),
    ),
    "set_value_in_place": Case(
        "set_value",
        program(
            lambda x: _set_value_in_place(
                x, axes=[1], starts=[1], ends=[3], steps=[1], shape=[1], dtype=5, values=[2.5]
            ),
            ([-1, 4], "float32"),
        ),
    ),
    "set_value_in_place_int64": Case(
        "set_value",
        program(
            lambda x: _set_value_in_place(
                x, axes=[0, 1], starts=[0, -1], ends=[1, 2**31 - 1], steps=[1, 1], decrease_axes=[0, 1],
                shape=[1], dtype=3, values=[-4],
            ),
            ([-1, 3], "int64"),
        ),
    ),
    "set_value_swin_mask": Case("set_value", program(_swin_mask, ([-1, 6, 6, 3], "float32"))),
    "set_value_rexnet": Case(
        "set_value", program(_rexnet_add, ([-1, 4, 3, 3], "float32"), ([-1, 2, 3, 3], "float32")),
    ),
    "set_value_tnt": Case("set_value", program(_tnt_add, ([-1, 5, 4], "float32"), ([-1, 4, 4], "float32"))),
}  # fmt: skip
