"""Saves one corpus architecture (a dygraph Layer) as Paddle's inference program files.

Run as a subprocess per format (`python -m tests.corpus.export FORMAT OUT NAME...`): whether
paddle.jit.save writes a legacy ProgramDesc (`model.pdmodel`) or a PIR program (`model.json`) is
FLAGS_enable_pir_api, read when paddle is imported, so each format gets a fresh interpreter; the
ecosystem modules' import-time side effects stay there too. For each NAME (see zoo.py) it builds
the Layer with a fixed seed and random weights (batch_norm statistics randomised so no norm is an
identity), puts it in eval mode and saves it with paddle.jit.to_static(full_graph=True).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

FORMATS = ("legacy", "pir")


def _import_paddle(fmt: str) -> Any:
    os.environ["FLAGS_enable_pir_api"] = "1" if fmt == "pir" else "0"  # noqa: SIM112
    import paddle

    return paddle


def legacy_compat_for_dy2static(paddle: Any) -> None:
    """tests/conformance/legacy_compat plus what dy2static needs on top (see
    shared/reference/paddle_legacy_compat.py): the dispatchers must not be AST-converted,
    tensor methods (`x.matmul(y)`) bound to the same builtins are patched on Variable too, and
    Tensor.device must not raise for an unallocated buffer (3.3.1 bug hit by nn.LSTM)."""
    from paddle.base import framework
    from paddle.base.dygraph import generated_tensor_methods_patch as generated

    from tests.conformance import legacy_compat

    patched = legacy_compat.install()
    for entry in patched:
        namespace_name, name = entry.rsplit(".", 1)
        namespace = (
            paddle.tensor if namespace_name.endswith("<proxy>") else sys.modules[namespace_name]
        )
        dispatch = getattr(namespace, name)
        if not getattr(dispatch, "_not_to_static", False):
            wrapped = paddle.jit.not_to_static(dispatch)
            wrapped._not_to_static = True
            setattr(namespace, name, wrapped)
    from paddle import _C_ops

    for name, original in [*generated.funcs_map, *generated.nn_funcs_map]:
        method = framework.Variable.__dict__.get(name)
        if method is not None and method in (original, getattr(_C_ops, name, None)):
            setattr(framework.Variable, name, getattr(paddle, name))
    tensor_device = paddle.Tensor.__dict__.get("device")
    if isinstance(tensor_device, property) and not getattr(tensor_device.fget, "_safe", False):

        def device(self: Any) -> Any:
            try:
                return tensor_device.fget(self)
            except ValueError:
                return None

        device._safe = True  # type: ignore[attr-defined]
        paddle.Tensor.device = property(device)


# Paddle 2.x's positional parameters that Paddle 3 made keyword-only, after the ones it kept
# positional: (class name, how many stay positional, the 2.x names that followed them).
_KEYWORD_ONLY_SINCE_3 = (
    ("Conv1D", 7, ("padding_mode", "weight_attr", "bias_attr", "data_format")),
    ("Conv2D", 7, ("padding_mode", "weight_attr", "bias_attr", "data_format")),
    ("Conv3D", 7, ("padding_mode", "weight_attr", "bias_attr", "data_format")),
    ("LayerNorm", 2, ("weight_attr", "bias_attr", "name")),
)


def positional_layer_args(paddle: Any) -> None:
    """Lets ecosystem code that subclasses paddle.nn layers pass Paddle 2.x's positional
    arguments (paddlespeech's Conv2D and LayerNorm): the extra ones become keywords."""
    for name, kept, names in _KEYWORD_ONLY_SINCE_3:
        layer = getattr(paddle.nn, name)
        original = layer.__init__
        if getattr(original, "_positional", False):
            continue

        def init(self: Any, *args: Any, _original: Any = original, _kept: int = kept,
                 _names: tuple[str, ...] = names, **kwargs: Any) -> None:  # fmt: skip
            kwargs.update(zip(_names, args[_kept:], strict=False))
            _original(self, *args[:_kept], **kwargs)

        init._positional = True  # type: ignore[attr-defined]
        layer.__init__ = init


def paddle2_functions(paddle: Any) -> None:
    """paddle.softmax is Paddle 3.3.1's torch-style compat function (`dim`, no `axis`); the
    ecosystem code calls it the Paddle 2.x way (paddlespeech's attention)."""
    paddle.softmax = paddle.nn.functional.softmax


def randomise(paddle: Any, layer: Any, seed: int) -> None:
    """Random batch_norm statistics (mean ~N(0, 0.1), variance ~U(0.5, 1.5)) and small noise on
    zero-initialised biases and weights (score heads start constant: their scores would tie)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for name, buffer in layer.named_buffers():
        if name.endswith(("_mean", "running_mean")):
            buffer.set_value(rng.normal(0, 0.1, buffer.shape).astype("float32"))
        elif name.endswith(("_variance", "running_var")):
            buffer.set_value(rng.uniform(0.5, 1.5, buffer.shape).astype("float32"))
    for parameter in layer.parameters():
        values = parameter.numpy()
        if values.dtype == np.float32 and values.size and not values.any():
            parameter.set_value(rng.normal(0, 0.02, values.shape).astype("float32"))


def export(paddle: Any, fmt: str, name: str, out: Path) -> dict[str, Any]:
    from tests.corpus import zoo

    entry = zoo.ENTRIES[name]
    paddle.seed(entry.seed)
    prefix = out / name / fmt / "model"
    # A fresh name scope per model: models that name their parameters (`conv1_weights`) would
    # otherwise clash with the previous model's in this process.
    with paddle.utils.unique_name.guard():
        layer = entry.build()
        randomise(paddle, layer, entry.seed)
        layer.eval()
        specs = [paddle.static.InputSpec(s.shape, s.dtype, s.name) for s in entry.inputs]
        static = paddle.jit.to_static(layer, input_spec=specs, full_graph=True)
        paddle.jit.save(static, str(prefix), input_spec=specs)
    return {"files": sorted(p.name for p in prefix.parent.iterdir())}


def main(argv: list[str]) -> int:
    fmt, out, *names = argv
    paddle = _import_paddle(fmt)
    positional_layer_args(paddle)
    paddle2_functions(paddle)
    if fmt == "legacy":
        legacy_compat_for_dy2static(paddle)
    report: dict[str, Any] = {}
    for name in names:
        try:
            report[name] = export(paddle, fmt, name, Path(out))
        except Exception as error:
            report[name] = {"error": f"{type(error).__name__}: {error}"[-2000:]}
            traceback.print_exc()
    print("@@EXPORT " + json.dumps(report))  # noqa: T201 (the parent reads this line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
