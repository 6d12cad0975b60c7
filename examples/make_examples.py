"""Exports the two example models with real Paddle, with sample inputs and Paddle's own outputs.

Usage: python examples/make_examples.py [--out DIR]   (default: the examples/ folder itself)

Paddle (3.3.1, a test-only dependency of graphgate) is needed to run this script, never to use
the files it writes. For each model it writes, under DIR/<model>/:
  model.pdmodel, model.pdiparams   paddle.static.save_inference_model, legacy ProgramDesc format
  <input>.npy                      a sample input, named after the program's feed
  request.json                     (text_classifier) the same input as a V2 JSON request
  expected_probs.npy               what Paddle's own Executor computes for that input
Weights and inputs come from fixed seeds, so a rerun writes the same numbers.

  image_classifier: a small CNN, image FP32[-1, 3, 32, 32] -> probs FP32[-1, 10]
  text_classifier:  embedding + mean pooling + 2 fc, ids INT64[-1, -1] -> probs FP32[-1, 2]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Paddle 3.x traces to PIR by default; graphgate accepts the legacy ProgramDesc (.pdmodel).
os.environ["FLAGS_enable_pir_api"] = "0"  # noqa: SIM112 (Paddle's spelling)

import numpy as np
import paddle

from graph_proto import framework_pb2 as pb

HERE = Path(__file__).resolve().parent
SEED = 2026
VOCAB = 1000
SEQ_LEN = 16
OUTPUT = "probs"  # the fetched variable's name, what a client asks for


@contextmanager
def building() -> Iterator[tuple[Any, Any]]:
    """A fresh (main, startup) program pair; seeding the global generator fixes the weights."""
    paddle.seed(SEED)
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = SEED
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        yield main, startup


def named_output(value: Any) -> Any:
    """Copies `value` into a variable called `probs`, so the fetch has a readable name."""
    out = (
        paddle.static.default_main_program()
        .global_block()
        .create_var(name=OUTPUT, dtype=value.dtype, shape=value.shape)
    )
    paddle.assign(value, output=out)
    return out


def image_classifier() -> tuple[list[Any], list[Any]]:
    """conv-relu-pool twice, global average pool, fc to 10 classes, softmax."""
    image = paddle.static.data("image", [-1, 3, 32, 32], "float32")
    net = paddle.nn.Sequential(
        paddle.nn.Conv2D(3, 8, 3, padding=1),
        paddle.nn.ReLU(),
        paddle.nn.MaxPool2D(2, 2),
        paddle.nn.Conv2D(8, 16, 3, padding=1),
        paddle.nn.ReLU(),
        paddle.nn.MaxPool2D(2, 2),
        paddle.nn.AdaptiveAvgPool2D(1),
        paddle.nn.Flatten(),
        paddle.nn.Linear(16, 10),
    )
    net.eval()
    return [image], [named_output(paddle.nn.functional.softmax(net(image)))]


def text_classifier() -> tuple[list[Any], list[Any]]:
    """Token embeddings averaged over the sequence, fc + relu, fc to 2 classes, softmax."""
    ids = paddle.static.data("ids", [-1, -1], "int64")
    embedded = paddle.nn.Embedding(VOCAB, 32)(ids)
    pooled = paddle.mean(embedded, axis=1)
    hidden = paddle.nn.functional.relu(paddle.nn.Linear(32, 16)(pooled))
    logits = paddle.nn.Linear(16, 2)(hidden)
    return [ids], [named_output(paddle.nn.functional.softmax(logits))]


def sample_inputs(name: str) -> dict[str, np.ndarray]:
    """Two samples per model (batch 2), from a fixed seed."""
    rng = np.random.default_rng(SEED)
    if name == "image_classifier":
        return {"image": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}
    return {"ids": rng.integers(0, VOCAB, (2, SEQ_LEN)).astype(np.int64)}


MODELS: dict[str, Callable[[], tuple[list[Any], list[Any]]]] = {
    "image_classifier": image_classifier,
    "text_classifier": text_classifier,
}


def export(name: str, out: Path) -> None:
    """Builds, initialises and saves one model; runs it with Paddle on the sample inputs."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    exe = paddle.static.Executor(paddle.CPUPlace())
    with building() as (main, startup):
        feeds, fetches = MODELS[name]()
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        paddle.static.save_inference_model(str(folder / "model"), feeds, fetches, exe, program=main)
    drop_callstacks(folder / "model.pdmodel")
    inputs = sample_inputs(name)
    for feed, value in inputs.items():
        np.save(folder / f"{feed}.npy", value)
    if name == "text_classifier":  # small enough to send as JSON with curl
        write_json_request(folder / "request.json", inputs)
    # Paddle's own outputs come from the saved files, as a user of them would load them.
    (expected,) = run_saved(folder / "model", inputs)
    np.save(folder / f"expected_{OUTPUT}.npy", expected)
    sizes = ", ".join(f"{p.name} {p.stat().st_size} B" for p in sorted(folder.iterdir()))
    print(f"{folder}: {sizes}")  # noqa: T201 (a script)


def drop_callstacks(path: Path) -> None:
    """Removes `op_callstack` attrs: they hold this script's absolute path and line numbers."""
    program = pb.ProgramDesc.FromString(path.read_bytes())
    for block in program.blocks:
        for op in block.ops:
            kept = [attr for attr in op.attrs if attr.name != "op_callstack"]
            del op.attrs[:]
            op.attrs.extend(kept)
    path.write_bytes(program.SerializeToString(deterministic=True))


def write_json_request(path: Path, inputs: dict[str, np.ndarray]) -> None:
    """A KServe V2 JSON inference request carrying `inputs` (INT64 here)."""
    entries = [
        {"name": feed, "shape": list(v.shape), "datatype": "INT64", "data": v.ravel().tolist()}
        for feed, v in inputs.items()
    ]
    path.write_text(json.dumps({"id": "example-1", "inputs": entries}) + "\n")


def run_saved(prefix: Path, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(paddle.static.Scope()):
        program, _, fetch_vars = paddle.static.load_inference_model(str(prefix), exe)
        return list(exe.run(program, feed=inputs, fetch_list=fetch_vars))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write into")
    args = parser.parse_args()
    paddle.enable_static()
    for name in MODELS:
        export(name, args.out)


if __name__ == "__main__":
    main()
