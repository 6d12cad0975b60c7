"""PyTriton (Triton's C++ HTTP frontend) around onnxruntime: every model twice, `<name>` without
dynamic batching and `<name>_db` with it (max batch 32, 200 us delay).
Usage: pytriton_server.py MODELS_DIR HTTP_PORT"""

from __future__ import annotations

from typing import Any

import numpy as np
from common import args, models, session
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

DTYPES = {"FP32": np.float32, "INT64": np.int64, "INT32": np.int32}


def infer_fn(path: Any) -> Any:
    sess = session(path)

    @batch
    def infer(**feeds: np.ndarray) -> dict[str, np.ndarray]:
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds), strict=True))

    return infer


def main() -> None:
    directory, port = args()
    config = TritonConfig(http_port=port, grpc_port=port + 1, metrics_port=port + 2)
    with Triton(config=config) as triton:
        for name, (path, sig) in models(directory).items():
            inputs = [
                Tensor(name=t["name"], dtype=DTYPES[t["datatype"]], shape=tuple(t["shape"][1:]))
                for t in sig["inputs"]
            ]
            outputs = [
                Tensor(name=t["name"], dtype=DTYPES[t["datatype"]], shape=tuple(t["shape"][1:]))
                for t in sig["outputs"]
            ]
            # "Without dynamic batching": Triton still merges what is queued at once when a
            # model declares a batch dim, so the plain model takes one request at a time.
            plain = ModelConfig(batching=False)
            full = [Tensor(name=t.name, dtype=t.dtype, shape=(-1, *t.shape)) for t in inputs]
            full_out = [Tensor(name=t.name, dtype=t.dtype, shape=(-1, *t.shape)) for t in outputs]
            triton.bind(name, _unbatched(path), full, full_out, config=plain, strict=False)
            dynamic = ModelConfig(
                max_batch_size=32, batcher=DynamicBatcher(max_queue_delay_microseconds=200)
            )
            triton.bind(f"{name}_db", infer_fn(path), inputs, outputs, config=dynamic, strict=False)
        triton.serve()


def _unbatched(path: Any) -> Any:
    sess = session(path)
    names = [o.name for o in sess.get_outputs()]

    def infer(requests: list[Any]) -> list[dict[str, np.ndarray]]:
        return [dict(zip(names, sess.run(names, dict(r)), strict=True)) for r in requests]

    return infer


if __name__ == "__main__":
    main()
