"""Shared by the peer servers (each runs in its own virtual environment): the ONNX models
graphgate served, opened with onnxruntime on CPU with the session settings graphgate uses."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import onnxruntime as ort


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def models(directory: str) -> dict[str, tuple[Path, dict[str, Any]]]:
    """name -> (its .onnx, its signature as bench_peers wrote it in models.json)."""
    root = Path(directory)
    listed = json.loads((root / "models.json").read_text())
    return {name: (root / f"{name}.onnx", sig) for name, sig in listed.items()}


def args() -> tuple[str, int]:
    return sys.argv[1], int(sys.argv[2])
