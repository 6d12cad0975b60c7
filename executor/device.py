"""Where sessions run, and why not on CUDA: the one answer every command gives.

onnxruntime-gpu (graphgate's onnxruntime) lists the CUDA provider on any machine, and falls back
to the CPU, silently or with a multi-line error, when CUDA cannot start. So whether CUDA is used
is decided here, from what really loads: the NVIDIA driver (`libcuda.so.1`, never from a wheel),
a GPU it can see, and the CUDA 12 / cuDNN 9 libraries onnxruntime dlopens by name. The NVIDIA
wheels (`pip install 'graphgate[cuda]'`) put those in site-packages, off the loader's path;
`onnxruntime.preload_dlls()` loads them from there first, so a machine with only the driver runs
the CUDA provider. `choose_providers` (every session), `graphgate doctor`, `/metrics` and the
start-up line of `check`, `run` and `serve` all read `session_device()`, computed once per process.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import logging
import threading
from dataclasses import dataclass
from typing import Final

import onnxruntime as ort

log = logging.getLogger("graphgate.device")

CUDA: Final = "CUDAExecutionProvider"
CPU: Final = "CPUExecutionProvider"
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
CUDA_12_DRIVER: Final = 12000  # cuDriverGetVersion's number for CUDA 12.0
_NOT_FOUND: Final = "cannot open shared object file"  # the loader's words for "no such file"


@dataclass(frozen=True, slots=True)
class Device:
    """Where this process's sessions run, and why CUDA is not used (None when it is)."""

    why_not_cuda: str | None
    libraries: dict[str, str | None]  # each library -> None when it loads, else the loader's error

    @property
    def on_cuda(self) -> bool:
        return self.why_not_cuda is None

    @property
    def providers(self) -> list[str]:
        """The execution providers sessions are built with, preferred first."""
        return [CUDA, CPU] if self.on_cuda else [CPU]

    def __str__(self) -> str:
        """The words doctor prints and check, run and serve say once: the same everywhere."""
        return "CUDA" if self.on_cuda else f"CPU (CUDA not used: {self.why_not_cuda})"


@functools.cache
def session_device(use_cuda: bool) -> Device:
    """This process's device. Cached: the libraries and the driver do not change under a
    running process, and every session build asks."""
    if not use_cuda:
        return Device("turned off by GRAPHGATE_USE_CUDA=false", {})
    if CUDA not in ort.get_available_providers():
        return Device("this onnxruntime build has no CUDA provider; install onnxruntime-gpu", {})
    preload()
    libraries = library_status()
    return Device(_why_not_cuda(libraries), libraries)


def _why_not_cuda(libraries: dict[str, str | None]) -> str | None:
    """The first reason the CUDA provider cannot start, in the order a user fixes them."""
    if (error := libraries.get(DRIVER)) is not None:
        if _NOT_FOUND in error:
            return f"no NVIDIA driver, {DRIVER} not found"
        return f"the NVIDIA driver does not load: {error}"
    if (problem := _driver_problem()) is not None:
        return problem
    missing = [name for name in RUNTIME_LIBRARIES if libraries.get(name) is not None]
    if missing:
        return f"CUDA libraries missing: {', '.join(missing)}; pip install 'graphgate[cuda]'"
    return None


def _driver_problem() -> str | None:
    """Asks the driver itself: it loads in containers that see no GPU, and an old one cannot
    run CUDA 12. None when it has a GPU for CUDA 12."""
    try:
        driver = ctypes.CDLL(DRIVER)
        if (status := driver.cuInit(0)) != 0:
            return f"the NVIDIA driver sees no usable GPU, cuInit: {_cuda_error(driver, status)}"
        count, version = ctypes.c_int(0), ctypes.c_int(0)
        driver.cuDeviceGetCount(ctypes.byref(count))
        driver.cuDriverGetVersion(ctypes.byref(version))
    except (OSError, AttributeError) as error:  # a broken install: say so, run on the CPU
        return f"the NVIDIA driver does not answer: {error}"
    if count.value == 0:
        return "the NVIDIA driver sees no GPU"
    if version.value < CUDA_12_DRIVER:
        major, minor = divmod(version.value, 1000)
        return f"the NVIDIA driver supports CUDA {major}.{minor // 10}, onnxruntime needs 12"
    return None


def _cuda_error(driver: ctypes.CDLL, status: int) -> str:
    name = ctypes.c_char_p()
    driver.cuGetErrorName(status, ctypes.byref(name))
    return name.value.decode() if name.value else f"error {status}"


@functools.cache
def preload() -> None:
    """Loads the CUDA libraries of the NVIDIA wheels, if any, before any session is built.
    Once per process: onnxruntime's loader prints what it could not find each time."""
    preload_dlls = getattr(ort, "preload_dlls", None)
    if preload_dlls is None or CUDA not in ort.get_available_providers():
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


_said_lock = threading.Lock()
_said: list[bool] = []  # one entry once said


def say_device_once(use_cuda: bool) -> None:
    """Logs where sessions run, once per process (`check`, `run` and `serve` call it; worker
    processes and library callers do not). A warning when CUDA was asked for and is not used."""
    with _said_lock:
        if _said:
            return
        _said.append(True)
    where = session_device(use_cuda)
    level = logging.WARNING if use_cuda and not where.on_cuda else logging.INFO
    log.log(level, "graphgate: running on %s", where)
