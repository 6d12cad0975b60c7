"""The CUDA path's pieces that run without a GPU: provider options from settings, the device
reported, and IO binding (the same code binds to `cuda` on a GPU; here it binds to `cpu`).
benchmarks/gpu_check.py runs the rest on a GPU machine."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from executor import SessionOptions, compile
from executor.device import CPU, CUDA
from executor.session import cuda_provider_options, device_of
from server.settings import Settings
from tests.support.builders import FP32, GraphBuilder, V
from validator import Policy, validate


def _fc(batch_dim: int) -> GraphBuilder:
    """y = relu(x @ w) over x[batch_dim, 16], w[16, 4] fed too (no params needed)."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [batch_dim, 16])
    w = g.feed("w", FP32, [16, 4])
    g.node(
        "matmul_v2",
        {"X": [x], "Y": [w]},
        {"Out": [V("h", [batch_dim, 4])]},
        {"trans_x": False, "trans_y": False},
    )
    g.node("relu", {"X": ["h"]}, {"Out": [V("y", [batch_dim, 4])]}, {})
    g.fetch("y")
    return g


def test_provider_options_carry_the_memory_cap_and_arena_strategy() -> None:
    options = SessionOptions(
        cuda_mem_limit_bytes=512 * 1024**2, cuda_arena_extend_strategy="kNextPowerOfTwo"
    )
    assert cuda_provider_options(options, fixed_shape=True) == {
        "device_id": "0",
        "arena_extend_strategy": "kNextPowerOfTwo",
        "gpu_mem_limit": str(512 * 1024**2),
    }


def test_no_memory_cap_means_onnxruntime_default() -> None:
    assert "gpu_mem_limit" not in cuda_provider_options(SessionOptions(), fixed_shape=True)


def test_cuda_graphs_only_for_fixed_shapes() -> None:
    options = SessionOptions(cuda_graphs=True)
    assert cuda_provider_options(options, fixed_shape=True)["enable_cuda_graph"] == "1"
    assert "enable_cuda_graph" not in cuda_provider_options(options, fixed_shape=False)
    assert "enable_cuda_graph" not in cuda_provider_options(SessionOptions(), fixed_shape=True)


def test_settings_reach_the_session_options() -> None:
    settings = Settings(
        cuda_mem_limit_mb=256, cuda_arena_extend_strategy="kNextPowerOfTwo", cuda_graphs=True
    )
    options = settings.session_options()
    assert options.cuda_mem_limit_bytes == 256 * 1024**2
    assert options.cuda_arena_extend_strategy == "kNextPowerOfTwo"
    assert options.cuda_graphs is True


def test_device_reported() -> None:
    assert device_of(CUDA, SessionOptions(cuda_device_id=1)) == "cuda:1"
    assert device_of(CPU, SessionOptions()) == "cpu"


def test_cpu_session_reports_cpu_and_does_not_bind() -> None:
    compiled = compile(
        validate(_fc(-1).program_bytes(), None, Policy()), SessionOptions(use_cuda=False)
    )
    assert (compiled.provider, compiled.device, compiled.bind_io) == (CPU, "cpu", False)


def test_io_binding_gives_the_outputs_of_a_plain_run() -> None:
    compiled = compile(
        validate(_fc(-1).program_bytes(), None, Policy()), SessionOptions(use_cuda=False)
    )
    bound = replace(compiled, bind_io=True)
    rng = np.random.default_rng(3)
    for batch in (1, 5):
        feeds = {
            "x": rng.standard_normal((batch, 16), dtype=np.float32),
            "w": rng.standard_normal((16, 4), dtype=np.float32),
        }
        expected = np.maximum(feeds["x"] @ feeds["w"], 0)
        np.testing.assert_allclose(bound.run(feeds)["y"], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(compiled.run(feeds)["y"], expected, rtol=1e-5, atol=1e-6)


def test_fixed_buffers_are_refilled_each_run() -> None:
    """The CUDA-graph path's buffers (made once, updated in place), exercised on CPU."""
    compiled = compile(
        validate(_fc(2).program_bytes(), None, Policy()), SessionOptions(use_cuda=False)
    )
    fixed = replace(compiled, bind_io=True, cuda_graph=True)
    rng = np.random.default_rng(4)
    for _ in range(3):
        feeds = {
            "x": rng.standard_normal((2, 16), dtype=np.float32),
            "w": rng.standard_normal((16, 4), dtype=np.float32),
        }
        expected = np.maximum(feeds["x"] @ feeds["w"], 0)
        np.testing.assert_allclose(fixed.run(feeds)["y"], expected, rtol=1e-5, atol=1e-6)
