"""What every conformance test module shares: its cached Paddle models freed when it ends."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from server.services.inference import _trim as return_freed_memory
from tests.conformance import models


@pytest.fixture(autouse=True, scope="module")
def _models_built_here_freed_after(request: pytest.FixtureRequest) -> Iterator[None]:
    """Drops, when a module's tests end, the models it cached (its own functools caches, and
    the numerically conditioned copies of models.calibrated): kept for the whole process,
    they held every program, parameter file and validated model a test worker ever built
    (8.8 GiB by the end of a run, measured). The base models of models.py stay cached: other
    modules build on the same ones."""
    yield
    module = request.module
    for value in vars(module).values():
        if getattr(value, "__module__", None) == module.__name__ and hasattr(value, "cache_clear"):
            value.cache_clear()
    models.calibrated.cache_clear()
    gc.collect()
    return_freed_memory()
