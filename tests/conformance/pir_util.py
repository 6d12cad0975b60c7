"""Saves programs Paddle 3.3.1 traces as PIR (model.json) and runs them with Paddle's own PIR
executor: the PIR twins of the legacy conformance programs (paddle_util)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import paddle.pir_utils
import pytest

from executor import SessionOptions, compile
from graph_proto.pir import parse_pir
from tests.conformance.paddle_util import (
    NO_BFLOAT16,
    Saved,
    bfloat16_refusal,
    onednn_refusal,
    paddle,
    random_feeds,
)
from validator import validate

Build = Callable[[], tuple[Sequence[Any], Sequence[Any]]]


def save_pir(build: Build, seed: int = 0) -> Saved:
    """`build()` traced into a PIR program and saved with save_inference_model (model.json)."""
    with paddle.pir_utils.IrGuard():
        paddle.seed(seed)
        main, startup = paddle.static.Program(), paddle.static.Program()  # type: ignore[no-untyped-call]
        with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
            feeds, fetches = build()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        with tempfile.TemporaryDirectory() as tmp:
            prefix = os.path.join(tmp, "model")
            paddle.static.save_inference_model(
                prefix, list(feeds), list(fetches), exe, program=main
            )
            params = Path(prefix + ".pdiparams")
            return Saved(
                program=Path(prefix + ".json").read_bytes(),
                params=params.read_bytes() if params.exists() else None,
                feeds=[],
                fetches=[],
            )


def legacy_view(saved: Saved) -> bytes:
    """The ProgramDesc graphgate reads a PIR program as (serialized), with the dtypes and dims
    Paddle recorded in the JSON: what dims_differences compares graphgate's inference with."""
    return parse_pir(saved.program, max_bytes=1 << 30).program.SerializeToString()


def run_paddle_pir(saved: Saved, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Paddle's PIR executor on the saved program. Skips where this CPU lacks the bfloat16
    kernels the program needs (as paddle_util.run_paddle does for legacy programs)."""
    with paddle.pir_utils.IrGuard(), tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "model")
        Path(prefix + ".json").write_bytes(saved.program)
        if saved.params is not None:
            Path(prefix + ".pdiparams").write_bytes(saved.params)
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(paddle.static.Scope()):  # type: ignore[attr-defined]
            program, _, fetch_vars = paddle.static.load_inference_model(prefix, exe)
            try:
                return list(exe.run(program, feed=feeds, fetch_list=fetch_vars))
            except RuntimeError as error:
                refusal = onednn_refusal(error)
                if refusal and b"t_bf16" in saved.program and bfloat16_refusal() is not None:
                    pytest.skip(f"{NO_BFLOAT16}: {refusal}")
                raise


def assert_pir_parity(
    saved: Saved,
    feeds: dict[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    validate_args: tuple[Any, ...] = (),
    scale_rtol: float = 0.0,
) -> dict[str, np.ndarray]:
    """graphgate and Paddle's PIR executor give the same fetches (floats within tolerance,
    integers and booleans exactly, same shapes and dtypes); returns graphgate's outputs.
    `scale_rtol`: the absolute tolerance is at least this fraction of the fetch's largest
    magnitude (see VISION_SCALE_RTOL in test_pir.py)."""
    validated = validate(saved.program, saved.params, *validate_args)
    feeds = feeds if feeds is not None else random_feeds(validated)
    ours = compile(validated, SessionOptions(use_cuda=False)).run(feeds)
    theirs = run_paddle_pir(saved, feeds)
    assert len(theirs) == len(validated.outputs)
    for spec, expected in zip(validated.outputs, theirs, strict=True):
        got = ours[spec.name]
        assert got.shape == expected.shape, f"{spec.name}: {got.shape} vs paddle {expected.shape}"
        assert got.dtype == expected.dtype, f"{spec.name}: {got.dtype} vs paddle {expected.dtype}"
        if np.issubdtype(expected.dtype, np.floating):
            scale = float(np.max(np.abs(expected), initial=0.0))
            tolerance = max(atol, scale_rtol * scale)
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=tolerance, err_msg=spec.name)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=spec.name)
    return ours


def vision_build(name: str, size: int = 32, channels: int = 3) -> Build:
    """paddle.vision.models.<name>() in eval mode on a [-1, channels, size, size] image; every
    output fetched (GoogLeNet's three heads)."""

    def build() -> tuple[Sequence[Any], Sequence[Any]]:
        image = paddle.static.data("image", [-1, channels, size, size], "float32")
        net = getattr(paddle.vision.models, name)()
        net.eval()
        out = net(image)
        return [image], list(out) if isinstance(out, (tuple, list)) else [out]

    return build
