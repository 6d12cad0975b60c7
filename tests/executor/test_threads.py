"""Many threads running one CompiledModel at once get exactly what one thread gets."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import numpy as np
import pytest

from executor import CompiledModel, SessionOptions, compile
from tests.support.builders import conv, mlp
from validator import validate

THREADS: Final = 8
REQUESTS: Final = 20  # per thread

Feeds = dict[str, np.ndarray]


def _compiled(program: bytes, params: bytes | None) -> CompiledModel:
    return compile(validate(program, params), SessionOptions(use_cuda=False))


def _requests(make: Callable[[np.random.Generator, int], Feeds]) -> list[list[Feeds]]:
    """THREADS x REQUESTS different inputs; request i of each thread has batch 1 + i % 4."""
    rng = np.random.default_rng(7)
    return [[make(rng, 1 + i % 4) for i in range(REQUESTS)] for _ in range(THREADS)]


def _run_concurrently(model: CompiledModel, requests: list[list[Feeds]]) -> list[list[Feeds]]:
    """Each thread runs its requests in order; all threads start together."""
    start = threading.Barrier(THREADS)

    def work(mine: list[Feeds]) -> list[Feeds]:
        start.wait()
        return [model.run(feeds) for feeds in mine]

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(work, requests))


def _assert_same_as_one_thread(model: CompiledModel, requests: list[list[Feeds]]) -> None:
    alone = [[model.run(feeds) for feeds in mine] for mine in requests]
    together = _run_concurrently(model, requests)
    for thread, (want, got) in enumerate(zip(alone, together, strict=True)):
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            assert list(g) == list(w)
            for name in w:  # bit-exact, shapes included
                np.testing.assert_array_equal(g[name], w[name], err_msg=f"{thread}/{i} {name}")


def test_threads_share_a_small_conv_net() -> None:
    built = conv(channels=3, filters=8, size=16).built()
    model = _compiled(built.program, built.params)

    def image(rng: np.random.Generator, batch: int) -> Feeds:
        return {"image": rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)}

    _assert_same_as_one_thread(model, _requests(image))


def test_threads_share_an_mlp() -> None:
    built = mlp((8, 32, 16, 4)).built()
    model = _compiled(built.program, built.params)

    def rows(rng: np.random.Generator, batch: int) -> Feeds:
        return {"x": rng.standard_normal((batch, 8)).astype(np.float32)}

    _assert_same_as_one_thread(model, _requests(rows))


@pytest.mark.paddle
def test_threads_share_a_paddle_model_with_dynamic_image_sizes() -> None:
    """mobilenet_v2 on [-1, 3, -1, -1]: every thread mixes batch sizes and image sizes, so the
    per-request shape re-inference and its cache run concurrently too."""
    models = pytest.importorskip("tests.conformance.models")
    saved = models.calibrated("mobilenet_v2_dynamic")
    model = _compiled(saved.program, saved.params)

    def image(rng: np.random.Generator, batch: int) -> Feeds:
        size = int(rng.choice([32, 40, 48]))
        return {"image": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}

    _assert_same_as_one_thread(model, _requests(image))
