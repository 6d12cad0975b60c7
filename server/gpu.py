"""The CUDA runtime onnxruntime-gpu needs: preloaded from the `graphgate[cuda]` wheels, checked.

onnxruntime-gpu dlopens CUDA, cuBLAS, cuFFT, cuRAND and cuDNN by name when it builds a CUDA
session. The NVIDIA wheels (`pip install 'graphgate[cuda]'`) put them in site-packages, off the
loader's path; `onnxruntime.preload_dlls()` loads them from there first, so a machine that has
only the NVIDIA driver runs the CUDA provider. `graphgate doctor` reports what was found.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
from typing import Final

import onnxruntime as ort

log = logging.getLogger("graphgate.gpu")
DRIVER: Final = "libcuda.so.1"  # from the NVIDIA driver, never from a wheel
# What onnxruntime-gpu 1.2x built for CUDA 12 / cuDNN 9 loads (sonames).
RUNTIME_LIBRARIES: Final = (
    "libcudart.so.12",
    "libcublas.so.12",
    "libcublasLt.so.12",
    "libcufft.so.11",
    "libcurand.so.10",
    "libnvrtc.so.12",
    "libcudnn.so.9",
)


def preload() -> None:
    """Loads the CUDA libraries of the NVIDIA wheels, if any, before any session is built."""
    preload_dlls = getattr(ort, "preload_dlls", None)
    if preload_dlls is None or "CUDAExecutionProvider" not in ort.get_available_providers():
        return
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):  # it prints its failures; they are logged
            preload_dlls()
    except Exception as error:  # a broken install must not stop a CPU-capable server
        log.warning("preloading the CUDA libraries failed: %s", error)
    if text := printed.getvalue().strip():
        log.info("onnxruntime.preload_dlls: %s", text)


def library_status(names: tuple[str, ...] = (DRIVER, *RUNTIME_LIBRARIES)) -> dict[str, str | None]:
    """Each library -> None when it loads, else why not (the loader's message)."""
    status: dict[str, str | None] = {}
    for name in names:
        try:
            ctypes.CDLL(name)
            status[name] = None
        except OSError as error:
            status[name] = str(error)
    return status


def why_not_cuda(use_cuda: bool, libraries: dict[str, str | None]) -> str | None:
    """None when the CUDA provider can be used, else the first reason it cannot."""
    if not use_cuda:
        return "GRAPHGATE_USE_CUDA is false"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "this onnxruntime build has no CUDA provider (install onnxruntime-gpu)"
    if libraries.get(DRIVER) is not None:
        return f"no NVIDIA driver ({DRIVER} does not load)"
    missing = [name for name in RUNTIME_LIBRARIES if libraries.get(name) is not None]
    if missing:
        return f"missing {', '.join(missing)}: pip install 'graphgate[cuda]'"
    return None
