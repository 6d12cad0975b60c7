"""What the server says about the device: `graphgate doctor`'s lines and the `/metrics`
provider label, all from the executor's one answer (`executor.session_device`).

`pip install 'graphgate[cuda]'` brings the CUDA 12 / cuDNN 9 runtime as wheels, preloaded before
the first session, so a machine that has only the NVIDIA driver runs the CUDA provider.
"""

from __future__ import annotations

from typing import Final

import onnxruntime as ort

from executor import session_device

_NOT_FOUND: Final = "cannot open shared object file"  # the loader's words for "no such file"


def provider_label(use_cuda: bool, device_id: int) -> tuple[str, str]:
    """The (provider, device) pair `/metrics` reports for this process's sessions."""
    where = session_device(use_cuda)
    return where.providers[0], f"cuda:{device_id}" if where.on_cuda else "cpu"


def doctor_lines(use_cuda: bool) -> list[str]:
    """The device as `graphgate doctor` prints it: the device and why CUDA is not used (the
    words `check`, `run` and `serve` say), the providers used, and each CUDA library."""
    where = session_device(use_cuda)
    built_with = ", ".join(ort.get_available_providers())
    lines = [
        f"device: {where}",
        f"execution providers used: {', '.join(where.providers)}",
        f"onnxruntime {ort.__version__}, built with: {built_with}",
    ]
    if where.libraries:  # empty when CUDA is off or not built in: nothing was loaded
        lines.append("CUDA libraries:")
    for name, error in where.libraries.items():
        found = "found" if error is None else f"missing ({_short(error)})"
        lines.append(f"  {name}: {found}")
    return lines


def _short(loader_error: str) -> str:
    return "not found" if _NOT_FOUND in loader_error else loader_error
