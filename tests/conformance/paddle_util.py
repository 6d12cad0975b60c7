"""Builds legacy (ProgramDesc) programs with real Paddle and compares them with graphgate's view.

Paddle is a test-only dependency; importing this module sets FLAGS_enable_pir_api=0 first.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

os.environ.setdefault("FLAGS_enable_pir_api", "0")
import numpy as np
import paddle
import pytest

from graph_proto import framework_pb2 as pb
from validator import ValidatedProgram, validate

paddle.enable_static()

_SHARED = Path(__file__).resolve().parents[3] / "shared" / "reference"


def install_legacy_compat() -> None:
    """Patches paddle.* functions that only trace to PIR (see shared/reference) when available."""
    from tests.conformance import legacy_compat

    legacy_compat.install()


@dataclass(frozen=True)
class Saved:
    """One program saved by paddle.static.save_inference_model, as bytes."""

    program: bytes
    params: bytes | None
    feeds: list[str]
    fetches: list[str]


@contextmanager
def building(seed: int = 0) -> Iterator[tuple[Any, Any]]:
    """A fresh (main, startup) program pair under program_guard, with a fixed seed."""
    # NOTE: Paddle 3.3.1's initializers draw from the global generator; Program.random_seed
    # alone does not fix them, so every program built here gets the same weights every run.
    paddle.seed(seed)
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = seed
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        yield main, startup


def save(
    main: Any, startup: Any, feeds: Sequence[Any], fetches: Sequence[Any], **kwargs: Any
) -> Saved:
    """Runs the startup program on CPU and saves the inference model; returns its bytes."""
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "model")
        paddle.static.save_inference_model(
            prefix, list(feeds), list(fetches), exe, program=main, **kwargs
        )
        params_path = Path(prefix + ".pdiparams")
        return Saved(
            program=Path(prefix + ".pdmodel").read_bytes(),
            params=params_path.read_bytes() if params_path.exists() else None,
            feeds=[v.name for v in feeds],
            fetches=[v.name for v in fetches],
        )


def build_and_save(
    build: Callable[[], tuple[Sequence[Any], Sequence[Any]]], seed: int = 0
) -> Saved:
    """`build()` creates feeds with paddle.static.data and returns (feeds, fetches)."""
    with building(seed) as (main, startup):
        feeds, fetches = build()
    return save(main, startup, feeds, fetches)


def recorded_types(program_bytes: bytes) -> dict[str, tuple[int, tuple[int, ...]]]:
    """name -> (VarType dtype number, dims) as Paddle stored them in block 0."""
    program = pb.ProgramDesc.FromString(program_bytes)
    found: dict[str, tuple[int, tuple[int, ...]]] = {}
    for var in program.blocks[0].vars:
        if var.type.type == pb.VarType.DENSE_TENSOR:
            tensor = var.type.dense_tensor.tensor
            found[var.name] = (int(tensor.data_type), tuple(tensor.dims))
    return found


def op_types(program_bytes: bytes) -> set[str]:
    """The op types in block 0 of a saved program."""
    return {op.type for op in pb.ProgramDesc.FromString(program_bytes).blocks[0].ops}


def dims_differences(
    validated: ValidatedProgram, program_bytes: bytes, exempt: Sequence[str] = ()
) -> list[str]:
    """Every var whose inferred dtype or dims differ from what Paddle recorded.

    Where Paddle records -1 and graphgate knows the size (constant folding of shape arithmetic),
    that is not a difference. Vars named in `exempt` and unused outputs are skipped.
    """
    differences = []
    for name, (dtype, dims) in recorded_types(program_bytes).items():
        ours = validated.types.get(name)
        if ours is None or name in exempt:
            continue
        same_rank = len(ours.shape) == len(dims)
        agree = same_rank and all(p == -1 or p == o for p, o in zip(dims, ours.shape, strict=True))
        if int(ours.dtype) != dtype or not agree:
            differences.append(
                f"{name}: paddle {pb.VarType.Type.Name(dtype)}{list(dims)}, "
                f"graphgate {ours.dtype.label}{list(ours.shape)}"
            )
    return differences


@contextmanager
def loaded(saved: Saved) -> Iterator[tuple[Any, list[Any], Any]]:
    """The saved inference program as Paddle loads it (in a fresh scope), its fetch vars, and an
    Executor to run it."""
    exe = paddle.static.Executor(paddle.CPUPlace())
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "model")
        Path(prefix + ".pdmodel").write_bytes(saved.program)
        if saved.params is not None:
            Path(prefix + ".pdiparams").write_bytes(saved.params)
        with paddle.static.scope_guard(paddle.static.Scope()):
            program, _, fetch_vars = paddle.static.load_inference_model(prefix, exe)
            yield program, fetch_vars, exe


def run_paddle(saved: Saved, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Runs the saved inference model with Paddle's own Executor (for numeric parity later).

    Skips the test where this CPU cannot run the bfloat16 kernels the program needs."""
    with loaded(saved) as (program, fetch_vars, exe):
        try:
            return list(exe.run(program, feed=feeds, fetch_list=fetch_vars))
        except RuntimeError as error:
            skip_where_the_cpu_lacks_bfloat16(saved, error)
            raise


# What oneDNN says when no implementation of a primitive runs on this CPU.
ONEDNN_REFUSAL = "could not create a primitive descriptor"
NO_BFLOAT16 = (
    "Paddle's oneDNN cannot run bfloat16 eltwise kernels on this CPU (no AVX-512 BF16 support)"
)


def onednn_refusal(error: BaseException) -> str | None:
    """The line of Paddle's error where oneDNN refuses to create a primitive, if it is one."""
    lines = (line.strip() for line in str(error).splitlines())
    return next((line for line in lines if ONEDNN_REFUSAL in line), None)


@cache
def bfloat16_refusal() -> str | None:
    """Why Paddle cannot run bfloat16 kernels on this CPU (oneDNN's words), or None where it can.

    Probed once per session with the smallest program that needs one: relu of a bfloat16
    tensor, which Paddle's CPU runs with oneDNN's eltwise primitive. That primitive exists only
    for CPUs with AVX-512 (BF16) instructions: elsewhere oneDNN refuses to create it."""
    with building() as (main, _), paddle.static.scope_guard(paddle.static.Scope()):
        x = paddle.static.data("x", [2], "float32")
        out = paddle.cast(paddle.nn.functional.relu(paddle.cast(x, "bfloat16")), "float32")
        exe = paddle.static.Executor(paddle.CPUPlace())
        try:
            exe.run(main, feed={"x": np.array([-1.0, 2.0], np.float32)}, fetch_list=[out])
        except RuntimeError as error:
            refusal = onednn_refusal(error)
            if refusal is None:
                raise  # not a missing CPU capability: the probe itself is wrong
            return refusal
    return None


def computes_in_bfloat16(program_bytes: bytes) -> bool:
    program = pb.ProgramDesc.FromString(program_bytes)
    return any(
        var.type.dense_tensor.tensor.data_type == pb.VarType.BF16
        for block in program.blocks
        for var in block.vars
        if var.type.type == pb.VarType.DENSE_TENSOR
    )


def skip_where_the_cpu_lacks_bfloat16(saved: Saved, error: BaseException) -> None:
    """Skips the test when Paddle's reference failed only because this CPU cannot run bfloat16:
    oneDNN refused a primitive, the program computes in bfloat16, and the probe confirms that
    this CPU lacks the kernels. Any other failure of Paddle's stays a failure."""
    refusal = onednn_refusal(error)
    if refusal and computes_in_bfloat16(saved.program) and bfloat16_refusal() is not None:
        pytest.skip(f"{NO_BFLOAT16}: {refusal}")


def random_feeds(
    validated: ValidatedProgram,
    *,
    batch: int = 2,
    dynamic: int = 5,
    int_high: int = 4,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Feeds for the signature: -1 dims become `batch` (axis 0) or `dynamic`; ints in [0, int_high)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in validated.inputs:
        shape = [
            d if d >= 0 else (batch if axis == 0 else dynamic) for axis, d in enumerate(spec.dims)
        ]
        dtype = spec.dtype.numpy
        if np.issubdtype(dtype, np.floating):
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[spec.name] = rng.random(shape) > 0.5
        else:
            feeds[spec.name] = rng.integers(0, int_high, shape).astype(dtype)
    return feeds


def assert_parity(
    saved: Saved,
    feeds: dict[str, np.ndarray] | None = None,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    validate_args: tuple[Any, ...] = (),
) -> dict[str, np.ndarray]:
    """graphgate's executor and Paddle's Executor give the same fetches (float within tolerance,
    integers and booleans exactly, same shapes, 0-D stays 0-D); returns graphgate's outputs.
    `validate_args`: a (policy[, registry]) for validate() other than the defaults."""
    from executor import SessionOptions, compile

    validated = validate(saved.program, saved.params, *validate_args)
    feeds = feeds if feeds is not None else random_feeds(validated)
    ours = compile(validated, SessionOptions(use_cuda=False)).run(feeds)
    theirs = run_paddle(saved, feeds)
    for name, expected in zip(saved.fetches, theirs, strict=True):
        got = ours[name]
        assert got.shape == expected.shape, f"{name}: shape {got.shape} vs paddle {expected.shape}"
        assert got.dtype == expected.dtype, f"{name}: dtype {got.dtype} vs paddle {expected.dtype}"
        if np.issubdtype(expected.dtype, np.floating):
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=name)
    return ours


__all__ = [
    "NO_BFLOAT16",
    "Saved",
    "assert_parity",
    "bfloat16_refusal",
    "build_and_save",
    "building",
    "computes_in_bfloat16",
    "dims_differences",
    "loaded",
    "op_types",
    "paddle",
    "random_feeds",
    "recorded_types",
    "run_paddle",
    "save",
    "sys",
]
