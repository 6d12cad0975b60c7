"""MLServer with a small custom onnxruntime runtime (no mlserver-onnx package exists).
Usage: mlserver_server.py MODELS_DIR HTTP_PORT  (writes a model repository, runs `mlserver start`)"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from common import args, models


def main() -> None:
    directory, port = args()
    repo = Path(tempfile.mkdtemp(prefix="mlserver-repo-"))
    (repo / "settings.json").write_text(
        json.dumps(
            {
                "http_port": port,
                "grpc_port": port + 1,
                "metrics_port": port + 2,
                "debug": False,
                "parallel_workers": 0,
            }
        )
    )
    here = str(Path(__file__).resolve().parent)
    for name, (path, _sig) in models(directory).items():
        (repo / name).mkdir()
        (repo / name / "model-settings.json").write_text(
            json.dumps(
                {
                    "name": name,
                    "implementation": "mlserver_runtime.OnnxRuntime",
                    "parameters": {"uri": str(path)},
                }
            )
        )
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    os.execv(sys.executable, [sys.executable, "-m", "mlserver.cli.main", "start", str(repo)])


if __name__ == "__main__":
    main()
