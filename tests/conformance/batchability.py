"""Which programs of the conformance suite the validator proves batchable: BATCHABILITY, the
figure (every conformance model, the text classifier and the control-flow programs: None where
proven, else the first op that couples rows, and why), and `batchability()`, which measures it
with real Paddle. tests/validator/test_batchable.py compares the two; tests/server/test_batching.py
batches only what the figure proves."""

from __future__ import annotations

from typing import Final

from validator import validate

# The figure: every conformance model, the text classifier and the control-flow programs.
# None: proven batchable; otherwise the first op that couples rows, and why.
BATCHABILITY: Final[dict[str, str | None]] = {
    "resnet18": None,
    "resnet50": None,
    "mobilenet_v1": None,
    "mobilenet_v2": None,
    "mobilenet_v2_dynamic": None,
    "mobilenet_v3_small": None,
    "mobilenet_v3_large": None,
    "vgg11": None,
    "squeezenet1_0": None,
    "squeezenet1_1": None,
    "shufflenet_v2_x0_25": None,
    "shufflenet_v2_swish": None,
    "densenet121": None,
    "googlenet": None,
    "lenet": None,
    "alexnet": None,
    "transformer_relu": None,
    "transformer_gelu": None,
    # nn.LSTM sizes its zero initial states from shape(ids)[0]: conservative (see report).
    "text_classifier": "block 0, op 3 (shape): reads the batch size: its value depends on how "
    "many rows run together",
    # cond(mean(x) > 0, ...): one branch for the whole batch.
    "cond_with_different_shapes": "block 0, op 1 (reduce_mean): reduces over the batch dimension",
    "cond_returning_several_values": "block 0, op 2 (reduce_sum): reduces over the batch dimension",
    "while_until_values_converge": "block 0, op 3 (reduce_max): reduces over the batch dimension",
    # Scalar (0-D or [1]) feeds: a loop bound or a branch value, not rows.
    "cond_on_zero_d_values": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at "
    "axis 0 of feed 'k', got dims []",
    "nested_cond": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at axis 0 of "
    "feed 'a', got dims []",
    "nested_while": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at axis 0 of "
    "feed 'n', got dims []",
    "while_counting_to_n": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at "
    "axis 0 of feed 'n', got dims []",
    "while_growing_a_tensor": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at "
    "axis 0 of feed 'n', got dims []",
    "while_with_cond_in_body": "block 0, op 0 (feed): expected a dynamic batch dimension (-1) at "
    "axis 0 of feed 'n', got dims [1]",
}


def batchability() -> dict[str, str | None]:
    """Validates every program of the figure (built with real Paddle) and returns its coupling."""
    from tests.conformance import control_flow
    from tests.conformance.models import MODELS
    from tests.conformance.paddle_util import Saved, build_and_save
    from tests.conformance.text_classifier import classifier

    programs: dict[str, Saved] = {name: make() for name, make in MODELS.items()}
    programs["text_classifier"] = classifier()
    for name in dir(control_flow):
        if name.startswith(("cond_", "while_", "nested_")):
            programs[name] = build_and_save(getattr(control_flow, name))
    found: dict[str, str | None] = {}
    for name, saved in programs.items():
        report = validate(saved.program, saved.params).report
        assert report.batchable == (report.batch_coupling is None)
        found[name] = report.batch_coupling
    return found
