"""PIR programs (Paddle 3's model.json): real files validate; hostile ones fail with stable codes.

The fixtures under data/ were written by Paddle 3.3.1's `paddle.jit.save` (make_pir_fixtures.py):
a conv/batch_norm/linear classifier with its .pdiparams, and a program with `if` and `while`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_proto.pdiparams import array, read_params, write_params
from graph_proto.pir import looks_like_pir
from graph_proto.types import DType
from validator import Policy, ValidationFailed, validate

DATA = Path(__file__).parent / "data"
CNN = (DATA / "pir_cnn.json").read_bytes()
CNN_PARAMS = (DATA / "pir_cnn.pdiparams").read_bytes()
CONTROL_FLOW = (DATA / "pir_control_flow.json").read_bytes()


def _doc(data: bytes = CNN) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(data)
    return doc


def _ops(doc: dict[str, Any]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = doc["program"]["regions"][0]["blocks"][0]["ops"]
    return ops


def _bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def _codes(data: bytes, params: bytes | None = CNN_PARAMS) -> list[str]:
    with pytest.raises(ValidationFailed) as failed:
        validate(data, params)
    return failed.value.codes


def _first(ops: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(op for op in ops if op["#"] == name)


# Real files.


def test_the_real_classifier_validates_with_paddles_output_name_and_dims() -> None:
    validated = validate(CNN, CNN_PARAMS)
    assert [(s.name, s.dims) for s in validated.inputs] == [("x", (-1, 3, 8, 8))]
    assert [(s.name, s.dims) for s in validated.outputs] == [("fetch_name_0", (-1, 5))]
    assert {"conv2d", "batch_norm", "matmul_v2", "reshape2"} <= set(validated.report.op_histogram)
    assert validated.report.param_count == 8


def test_the_real_control_flow_program_becomes_legacy_sub_blocks() -> None:
    validated = validate(CONTROL_FLOW, None)
    histogram = validated.report.op_histogram
    assert histogram["conditional_block"] == 2 and histogram["select_input"] == 1
    assert histogram["while"] == 1
    assert len(validated.program.blocks) == 4


def test_format_is_told_by_content_not_by_name() -> None:
    assert looks_like_pir(CNN) and looks_like_pir(b"  \n{")
    assert not looks_like_pir(b"\x0a\x02\x08\x00")  # a ProgramDesc starts with field 1


def test_params_in_another_order_than_sorted_names_are_rejected_like_legacy_ones() -> None:
    tensors = [(DType.FP32, array(CNN_PARAMS, t)) for t in read_params(CNN_PARAMS)]
    tensors[0], tensors[-1] = tensors[-1], tensors[0]  # [4] bias <-> [256, 5] weight
    assert "PARAMS_DIMS" in _codes(CNN, write_params(tensors))


def test_params_are_required_when_the_program_has_parameters() -> None:
    assert _codes(CNN, None) == ["PARAMS_MISSING"]


def _with_extra_parameter(flags: Any) -> bytes:
    """The CNN with one more builtin.parameter (uint8, as nn.LSTM's dropout state) whose result
    attributes are `flags` ([persistable, stop_gradient, trainable] in Paddle's files)."""
    doc = _doc()
    ops = _ops(doc)
    extra = copy.deepcopy(_first(ops, "p"))
    extra["A"][3] = "lstm_0.dropout_state__non_persistable"
    extra["O"] = {
        "%": 10_000,
        "TT": {"#": "0.t_dtensor", "D": [{"#": "0.t_ui8"}, [], "NCHW", [], 0]},
    }
    extra["OA"] = flags
    ops.insert(0, extra)
    return _bytes(doc)


def test_a_non_persistable_parameter_is_not_looked_for_in_the_params_file() -> None:
    # Paddle's jit.save writes nn.LSTM's dropout state as a parameter op with persistable 0
    # and leaves it out of .pdiparams (the CRNN and DeepSpeech2 corpus models).
    validated = validate(_with_extra_parameter([0, 1, 0]), CNN_PARAMS)
    assert validated.report.param_count == 8


def test_a_persistable_parameter_missing_from_the_params_file_is_still_refused() -> None:
    assert _codes(_with_extra_parameter([1, 1, 0])) == ["PARAMS_COUNT"]


@pytest.mark.parametrize("flags", [{}, [], ["yes"], [2, 0, 1]], ids=str)
def test_malformed_parameter_flags_are_refused(flags: Any) -> None:
    assert _codes(_with_extra_parameter(flags)) == ["PROGRAM_MALFORMED"]


# Bytes and JSON.


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"{", "PROGRAM_MALFORMED"),
        (CNN[: len(CNN) // 2], "PROGRAM_MALFORMED"),
        (b"{\xff\xfe}", "PROGRAM_MALFORMED"),
        (b"{}", "PROGRAM_MALFORMED"),
        (b'{"base_code": {"magic": "pir", "version": 4}, "program": []}', "PROGRAM_MALFORMED"),
        (b"{" + b"[" * 100_000, "PROGRAM_TOO_COMPLEX"),
        (b'{"a": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, "PROGRAM_TOO_COMPLEX"),
        (b'{"a": 1, "a": 2}', "PROGRAM_MALFORMED"),
        (b'{"a": NaN}', "PROGRAM_MALFORMED"),
        (b'{"a": Infinity}', "PROGRAM_MALFORMED"),
        (b'{"a": 1e999}', "PROGRAM_MALFORMED"),
        (b'{"a": ' + b"9" * 5000 + b"}", "PROGRAM_MALFORMED"),
        (b'{"a": 99999999999999999999}', "PROGRAM_MALFORMED"),
    ],
    ids=[
        "unterminated",
        "truncated",
        "not-utf8",
        "empty-object",
        "program-not-object",
        "array-bomb",
        "object-bomb",
        "duplicate-key",
        "nan",
        "infinity",
        "float-overflow",
        "huge-int",
        "int-over-int64",
    ],
)
def test_bad_json_is_refused_with_a_code(data: bytes, code: str) -> None:
    assert _codes(data) == [code]


def test_size_cap_comes_before_parsing() -> None:
    with pytest.raises(ValidationFailed) as failed:
        validate(CNN, CNN_PARAMS, Policy(max_program_bytes=100))
    assert failed.value.codes == ["PROGRAM_TOO_LARGE"]


def test_duplicate_key_deep_inside_an_op_is_refused() -> None:
    text = CNN.replace(b'"N":"strides"', b'"N":"strides","N":"strides"', 1)
    assert text != CNN
    assert _codes(text) == ["PROGRAM_MALFORMED"]


# Structure and values.


def test_a_value_used_before_it_is_defined_is_refused() -> None:
    doc = _doc()
    ops = _ops(doc)
    conv = _first(ops, "1.conv2d")
    conv["I"][0]["%"] = 10_000
    with pytest.raises(ValidationFailed) as failed:
        validate(_bytes(doc), CNN_PARAMS)
    assert failed.value.codes == ["PIR_VALUE_UNDEFINED"]
    assert "pd_op.conv2d" in failed.value.diagnostics[0].message


def test_a_value_read_before_its_definition_in_program_order_is_refused() -> None:
    doc = _doc()
    ops = _ops(doc)
    relu = _first(ops, "1.relu")
    ops.remove(relu)
    ops.insert(ops.index(_first(ops, "1.conv2d")), relu)
    assert _codes(_bytes(doc)) == ["PIR_VALUE_UNDEFINED"]


def test_a_value_defined_twice_is_refused() -> None:
    doc = _doc()
    ops = _ops(doc)
    _first(ops, "1.relu")["O"][0]["%"] = _first(ops, "1.conv2d")["O"][0]["%"]
    assert _codes(_bytes(doc)) == ["VAR_REDEFINED"]


def test_a_value_id_out_of_range_is_refused() -> None:
    doc = _doc()
    _first(_ops(doc), "1.relu")["O"][0]["%"] = 2**40
    assert _codes(_bytes(doc)) == ["PROGRAM_MALFORMED"]


def test_a_loop_body_value_is_invisible_after_the_loop() -> None:
    doc = _doc(CONTROL_FLOW)
    ops = _ops(doc)
    body = _first(ops, "1.while")["regions"][0]["blocks"][0]["ops"]
    _first(ops, "1.fetch")["I"][0]["%"] = body[0]["O"][0]["%"]
    assert _codes(_bytes(doc), None) == ["PIR_VALUE_UNDEFINED"]


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda op: op.update({"I": "x"}), "PROGRAM_MALFORMED"),
        (lambda op: op.update({"A": {}}), "PROGRAM_MALFORMED"),
        (lambda op: op["A"][0]["AT"].update({"D": "one"}), "PROGRAM_MALFORMED"),
        (lambda op: op["A"][4]["AT"].update({"D": 2**40}), "PROGRAM_MALFORMED"),
        (lambda op: op["A"][0]["AT"].update({"#": "0.a_pointer"}), "ATTR_TYPE"),
        (lambda op: op["O"][0]["TT"].update({"#": "0.t_selected_rows"}), "VAR_TYPE"),
        (lambda op: op["O"][0]["TT"]["D"][0].update({"#": "0.t_c64"}), "VAR_TYPE"),
        (lambda op: op["O"][0]["TT"]["D"].__setitem__(1, [1] * 65), "PROGRAM_TOO_COMPLEX"),
        (lambda op: op["O"][0].update({"%": True}), "PROGRAM_MALFORMED"),
    ],
    ids=[
        "operands-not-array",
        "attrs-not-array",
        "attr-wrong-type",
        "int32-out-of-range",
        "unknown-attr-kind",
        "unknown-value-type",
        "unknown-dtype",
        "rank-over-cap",
        "id-is-boolean",
    ],
)
def test_wrong_types_in_an_op_are_refused(mutate: Any, code: str) -> None:
    doc = _doc()
    mutate(_first(_ops(doc), "1.conv2d"))
    assert _codes(_bytes(doc)) == [code]


def test_an_unknown_dialect_is_refused_at_its_position() -> None:
    doc = _doc()
    ops = _ops(doc)
    _first(ops, "1.relu")["#"] = "7.relu"
    with pytest.raises(ValidationFailed) as failed:
        validate(_bytes(doc), CNN_PARAMS)
    assert failed.value.codes == ["PIR_DIALECT_UNKNOWN"]


@pytest.mark.parametrize(
    ("op_name", "code"),
    [("1.save_combine", "OP_UNKNOWN"), ("1.py_func", "OP_UNKNOWN"), ("1.not_an_op", "OP_UNKNOWN")],
)
def test_ops_outside_the_table_are_reported_at_the_pir_op(op_name: str, code: str) -> None:
    doc = _doc()
    ops = _ops(doc)
    relu = _first(ops, "1.relu")
    relu["#"] = op_name
    with pytest.raises(ValidationFailed) as failed:
        validate(_bytes(doc), CNN_PARAMS)
    assert code in failed.value.codes
    diagnostic = next(d for d in failed.value.diagnostics if d.code == code)
    assert diagnostic.op_index == ops.index(relu)
    assert diagnostic.op_type == "pd_op." + op_name[2:]
    assert f"block 0, op {ops.index(relu)} (pd_op.{op_name[2:]})" in str(diagnostic)


def test_validation_diagnostics_point_at_the_pir_op() -> None:
    doc = _doc()
    ops = _ops(doc)
    conv = _first(ops, "1.conv2d")
    next(a for a in conv["A"] if a["N"] == "groups")["AT"]["D"] = 0
    with pytest.raises(ValidationFailed) as failed:
        validate(_bytes(doc), CNN_PARAMS)
    diagnostic = failed.value.diagnostics[0]
    assert (diagnostic.block, diagnostic.op_index, diagnostic.op_type) == (
        0,
        ops.index(conv),
        "pd_op.conv2d",
    )


def test_a_computed_tensor_where_a_constant_is_needed_is_refused() -> None:
    doc = _doc()
    ops = _ops(doc)
    full = next(op for op in ops if op["#"] == "1.full")
    add = ops[-2]
    assert add["#"] == "1.add"
    # The scale factor of a pd_op.scale must be a constant; feed it a computed tensor.
    scale = {
        "#": "1.scale",
        "A": [{"AT": {"#": "0.a_f32", "D": 0.0}, "N": "bias"}],
        "I": [add["I"][0], {"%": add["O"][0]["%"]}],
        "O": [{"%": 9000, "TT": add["O"][0]["TT"]}],
        "OA": [],
    }
    ops.insert(ops.index(add) + 1, scale)
    assert full["#"] == "1.full"
    assert _codes(_bytes(doc)) == ["PIR_UNSUPPORTED"]


# Fuzzing: mutations of a real file never escape as anything but ValidationFailed.

_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.just([]),
    st.just({}),
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(_paths(child, (*path, key)))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found.extend(_paths(child, (*path, i)))
    return found


_BASE = _doc()
_ALL_PATHS = _paths(_BASE)[1:]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(_ALL_PATHS), _LEAVES, st.booleans()), min_size=1, max_size=3
    )
)
def test_mutated_real_file_never_raises_anything_but_validation_failed(
    edits: list[tuple[tuple[Any, ...], Any, bool]],
) -> None:
    doc = copy.deepcopy(_BASE)
    for path, leaf, delete in edits:
        parent: Any = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if delete and isinstance(parent, (dict, list)):
                del parent[path[-1]]
            else:
                parent[path[-1]] = leaf
        except (KeyError, IndexError, TypeError):
            continue
    try:
        validated = validate(_bytes(doc), CNN_PARAMS)
    except ValidationFailed as failed:
        assert failed.value.codes if hasattr(failed, "value") else failed.codes
        return
    assert validated.outputs  # a mutation may be harmless (a struct_name): then it validates


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(CNN) - 1), byte=st.integers(0, 255))
def test_byte_flips_never_raise_anything_but_validation_failed(cut: int, byte: int) -> None:
    data = CNN[:cut] + bytes([byte]) + CNN[cut + 1 :]
    try:
        validate(data, CNN_PARAMS)
    except ValidationFailed as failed:
        assert failed.codes


def test_numbers_in_the_real_file_round_trip() -> None:
    # The conversion keeps float attributes exactly (momentum is a float32 written as f64 text).
    validated = validate(CNN, CNN_PARAMS)
    bn = next(op for op in validated.program.blocks[0].ops if op.type == "batch_norm")
    momentum = next(a.f for a in bn.attrs if a.name == "momentum")
    assert np.float32(momentum) == np.float32(0.9)
