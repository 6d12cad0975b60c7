"""Unknown dims that are no batch: a streaming ASR program (deepspeech2_online's shape) whose
state inputs are declared [-1, -1, -1] and split into 3 along axis 0 (really [3, B, hidden]).
Binding every unknown dim 0 to the max batch once refused it; the validator now asks the ops
which sizes each dim takes, runs it like Paddle, and refuses a request that breaks what the ops
require (validator/dims.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from executor import ExecutionError, SessionOptions, compile
from tests.conformance.paddle_util import assert_parity, build_and_save, paddle
from tests.conformance.pir_util import assert_pir_parity, save_pir
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle

HIDDEN = 16


def _streaming_asr() -> tuple[list[Any], list[Any]]:
    """Three stacked one-layer LSTMs whose initial states come split from one state input
    each, the next states concatenated back (deepspeech2_online's chunk_state_h_box/c_box)."""
    x = paddle.static.data("audio_chunk", [-1, -1, 8], "float32")
    h = paddle.static.data("chunk_state_h_box", [-1, -1, -1], "float32")
    c = paddle.static.data("chunk_state_c_box", [-1, -1, -1], "float32")
    hs, cs = paddle.split(h, 3, axis=0), paddle.split(c, 3, axis=0)
    out, next_h, next_c = x, [], []
    for layer in range(3):
        lstm = paddle.nn.LSTM(8 if layer == 0 else HIDDEN, HIDDEN)
        out, (h1, c1) = lstm(out, (hs[layer], cs[layer]))
        next_h.append(h1)
        next_c.append(c1)
    return [x, h, c], [out, paddle.concat(next_h, 0), paddle.concat(next_c, 0)]


def _feeds(batch: int, steps: int, layers: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "audio_chunk": rng.standard_normal((batch, steps, 8)).astype(np.float32),
        "chunk_state_h_box": rng.standard_normal((layers, batch, HIDDEN)).astype(np.float32),
        "chunk_state_c_box": rng.standard_normal((layers, batch, HIDDEN)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def legacy() -> Any:
    return build_and_save(_streaming_asr)


def test_state_inputs_validate_with_their_dims_fixed_and_named(legacy: Any) -> None:
    report = validate(legacy.program, legacy.params).report
    assert dict(report.symbolic_inputs) == {
        "audio_chunk": ("B", "D1", 8),
        "chunk_state_h_box": (3, "B", HIDDEN),
        "chunk_state_c_box": (3, "B", HIDDEN),
    }
    assert [(s.name, s.dims) for s in report.inputs] == [
        ("audio_chunk", (-1, -1, 8)),
        ("chunk_state_h_box", (3, -1, HIDDEN)),
        ("chunk_state_c_box", (3, -1, HIDDEN)),
    ]
    assert report.batch == 32  # budgets still at the policy's max batch
    fixed = {(c.feed, c.axis): c.constraint.value for c in report.dim_constraints}
    assert fixed == {
        ("chunk_state_h_box", 0): 3,
        ("chunk_state_h_box", 2): HIDDEN,
        ("chunk_state_c_box", 0): 3,
        ("chunk_state_c_box", 2): HIDDEN,
    }


@pytest.mark.parametrize(("batch", "steps"), [(1, 4), (2, 7)])
def test_it_runs_like_paddle(legacy: Any, batch: int, steps: int) -> None:
    assert_parity(legacy, _feeds(batch, steps, seed=batch))


@pytest.mark.parametrize("layers", [2, 6])
def test_a_state_of_another_layer_count_is_refused_naming_the_input_and_the_op(
    legacy: Any, layers: int
) -> None:
    model = compile(validate(legacy.program, legacy.params), SessionOptions(use_cuda=False))
    with pytest.raises(ExecutionError) as info:
        model.run(_feeds(2, 4, layers=layers))
    assert info.value.code == "INPUT_SHAPE"
    message = str(info.value)
    assert message.startswith(
        "input 'chunk_state_h_box': chunk_state_h_box dim 0 must be 3 (required by block 0, op "
    )
    assert "(split)" in message and message.endswith(f"got {layers}")


def test_the_pir_twin_validates_and_runs_like_paddle() -> None:
    saved = save_pir(_streaming_asr)
    report = validate(saved.program, saved.params).report
    assert dict(report.symbolic_inputs)["chunk_state_h_box"] == (3, "B", HIDDEN)
    assert_pir_parity(saved, _feeds(2, 5))


def test_a_declared_dim_bounds_the_budgets_and_each_request(legacy: Any) -> None:
    declared = validate(legacy.program, legacy.params, dims={"D1": 64})
    plain = validate(legacy.program, legacy.params)
    assert declared.report.flops_per_sample < plain.report.flops_per_sample  # at 64, not 512
    model = compile(declared, SessionOptions(use_cuda=False))
    model.run(_feeds(1, 64))
    with pytest.raises(ExecutionError, match=r"audio_chunk dim 1 must be at most 64 \(D1 declared"):
        model.run(_feeds(1, 65))


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ({"B": 8}, "declared B=8: expected a dim other than the batch"),
        (
            {"T": 8},
            "declared T=8: expected one of ['D1', 'D2', 'D3', 'D4', 'D5'] or FEED.AXIS for an unknown dim, got 'T'",
        ),
        ({"audio_chunk.1": 0}, "declared audio_chunk.1=0: expected a size in 1..2147483647, got 0"),
    ],
)
def test_bad_declarations_are_refused(legacy: Any, dims: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate(legacy.program, legacy.params, dims=dims)
    assert info.value.codes == [Code.DIM_DECLARATION]
    assert info.value.diagnostics[0].message.startswith(message)


def test_graphgate_check_takes_dim_declarations(legacy: Any, tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from server.cli.main import app

    program = tmp_path / "asr.pdmodel"
    program.write_bytes(legacy.program)
    (tmp_path / "asr.pdiparams").write_bytes(legacy.params)
    result = CliRunner().invoke(app, ["check", str(program), "--json", "--dim", "D1=64"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)["report"]
    assert report["symbolic_inputs"]["chunk_state_h_box"] == [3, "B", HIDDEN]
    declared = [c for c in report["dim_constraints"] if c["input"] == "audio_chunk"]
    assert declared == [
        {
            "input": "audio_chunk",
            "dim": 1,
            "kind": "at_most",
            "value": 64,
            "reason": "D1 declared at upload",
        }
    ]


def _pir_positions(program: bytes, op: str) -> list[int]:
    """Where `op` ("1.split_with_num": dialect 1, pd_op) sits in the PIR program's top block."""
    import json

    ops = json.loads(program)["program"]["regions"][0]["blocks"][0]["ops"]
    return [index for index, found in enumerate(ops) if found.get("#") == op]


def test_a_pir_programs_constraints_name_its_own_ops() -> None:
    """The reasons (report, refused request) number the PIR program's ops as the PIR program
    does, by their pd_op names: not the converted program's legacy ops."""
    saved = save_pir(_streaming_asr)
    validated = validate(saved.program, saved.params)
    splits = _pir_positions(saved.program, "1.split_with_num")
    rnn = _pir_positions(saved.program, "1.rnn")[0]  # the first layer's takes the states
    assert len(splits) == 2
    reasons = {(c.feed, c.axis): c.reason for c in validated.report.dim_constraints}
    assert reasons[("chunk_state_h_box", 0)] == (
        f"required by block 0, op {splits[0]} (pd_op.split_with_num) "
        f"and block 0, op {rnn} (pd_op.rnn)"
    )
    assert reasons[("chunk_state_c_box", 2)] == f"required by block 0, op {rnn} (pd_op.rnn)"
    model = compile(validated, SessionOptions(use_cuda=False))
    with pytest.raises(ExecutionError) as info:
        model.run(_feeds(2, 4, layers=2))
    assert f"op {splits[0]} (pd_op.split_with_num)" in str(info.value)


def _contradicting() -> tuple[list[Any], list[Any]]:
    """x [-1, 4]: a split into 3 along axis 0 wants dim 0 divisible by 3, an add of a [2, 4]
    parameter wants it 2 (or 1): no size satisfies both."""
    x = paddle.static.data("x", [-1, 4], "float32")
    other = paddle.create_parameter([2, 4], "float32")
    return [x], [paddle.split(x, 3, axis=0)[0], x + other]


def test_a_pir_contradiction_points_at_the_pir_op() -> None:
    saved = save_pir(_contradicting)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    (refusal,) = info.value.diagnostics
    assert refusal.code == Code.SHAPE_MISMATCH
    assert refusal.op_type is not None and refusal.op_type.startswith("pd_op.")
    names = {"pd_op.matmul": "1.matmul", "pd_op.add": "1.add"}
    assert refusal.op_type in names
    assert [refusal.op_index] == _pir_positions(saved.program, names[refusal.op_type])


def _lstm_fed_its_states() -> tuple[list[Any], list[Any]]:
    """paddle.nn.LSTM (2 layers) fed h0/c0 declared [-1, -1, HIDDEN]: dim 0 is the layers (2),
    dim 1 the batch of x. Once dim 0 is fixed at 2, dim 1 joins the batch without dim 0
    moving back with it."""
    x = paddle.static.data("x", [-1, -1, 8], "float32")
    h0 = paddle.static.data("h0", [-1, -1, HIDDEN], "float32")
    c0 = paddle.static.data("c0", [-1, -1, HIDDEN], "float32")
    out, (h1, c1) = paddle.nn.LSTM(8, HIDDEN, num_layers=2)(x, (h0, c0))
    return [x, h0, c0], [out, h1, c1]


def test_an_lstm_fed_its_initial_states_validates_and_runs_like_paddle() -> None:
    saved = build_and_save(_lstm_fed_its_states)
    report = validate(saved.program, saved.params).report
    assert dict(report.symbolic_inputs) == {
        "x": ("B", "D1", 8),
        "h0": (2, "B", HIDDEN),
        "c0": (2, "B", HIDDEN),
    }
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.standard_normal((3, 5, 8)).astype(np.float32),
        "h0": rng.standard_normal((2, 3, HIDDEN)).astype(np.float32),
        "c0": rng.standard_normal((2, 3, HIDDEN)).astype(np.float32),
    }
    assert_parity(saved, feeds)
