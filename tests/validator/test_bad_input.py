"""threats.md section 7: every hostile .pdmodel/.pdiparams is rejected with its own code, and
nothing but ValidationFailed ever escapes validate().

One table, ROWS in tests/support/bad_inputs.py (tests/test_check_equals_upload.py sends the same
rows through the CLI and the HTTP API): each row is (id, expected code, a function making the
upload). MESSAGES asserts the full text of representative diagnostics, because messages are API.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.bad_inputs import ROWS, Make, Row, many_reads, valid
from validator import Code, ValidationFailed, validate

# -- messages are API: the full text of representative diagnostics -------------------------------

MESSAGES = {
    "pir-full-folded-huge": "program: block 0, op 21 (pd_op.scale): operand 1: expected a "
    "constant of at most 1048576 elements to fold into `scale`, got dims [1000000000] "
    "[PROGRAM_TOO_COMPLEX]",
    "pir-full-operand-undefined": "program: block 0, op 20 (pd_op.full): pd_op.full operand 0: "
    "expected a value defined earlier, got %999 [PIR_VALUE_UNDEFINED]",
    "program-empty": "program: expected a ProgramDesc, got 0 bytes [PROGRAM_EMPTY]",
    "program-over-cap": "program: expected at most 67108864 bytes, got 67108865; not parsed "
    "[PROGRAM_TOO_LARGE]",
    "program-invalid-utf8": "program: expected UTF-8 text in every string field, got invalid "
    "bytes [PROGRAM_MALFORMED]",
    "missing-block-idx": "program: required fields are missing: blocks[0].idx "
    "[PROGRAM_MISSING_FIELD]",
    "unknown-field-op": "program: expected only fields and enum values of Paddle's "
    "framework.proto, got unknown program.blocks[0].ops[1]#25 [PROGRAM_UNKNOWN_FIELD]",
    "block-idx-99": "block 0, op 4 (conditional_block): attribute 'sub_block': expected a "
    "sub-block index in [1, 2), got 99 [BLOCK_REFERENCE]",
    "sub-block-is-block-0": "block 0, op 4 (conditional_block): attribute 'sub_block': block 0 is "
    "this op's own block or an ancestor of it [BLOCK_CYCLE]",
    "sub-block-unreferenced": "block 1: expected a sub-block owned by one op, got none "
    "[BLOCK_UNREFERENCED]",
    "parent-idx-cycle": "block 1: expected parent_idx links to end at block 0, got a cycle "
    "[BLOCK_CYCLE]",
    "parent-idx-out-of-range": "block 1: expected idx 1 and parent_idx in [0, 3) and != 1, got "
    "idx 1 and parent_idx 7 [BLOCK_INDEX]",
    "nesting-1100-deep": "program: expected at most 1024 blocks, got 1101 [PROGRAM_TOO_COMPLEX]",
    "nesting-9-deep": "block 9: expected nesting depth <= 8, got 9 [NESTING_TOO_DEEP]",
    "forbidden-save_combine": "block 0, op 4 (save_combine): op 'save_combine' touches files, "
    "network, devices or user code and is never allowed [OP_FORBIDDEN]",
    "forbidden-c_allreduce_sum": "block 0, op 4 (c_allreduce_sum): op 'c_allreduce_sum' belongs "
    "to a collective, distributed, reader or engine family and is never allowed [OP_FORBIDDEN]",
    "feed-col-minus-1": "block 0, op 0 (feed): expected an INT attribute 'col' >= 0, got -1 "
    "[FEED_FETCH_INVALID]",
    "feed-col-int32-max": "program: expected feed cols 0..0, got [2147483647] [FEED_FETCH_INVALID]",
    "feed-col-duplicate": "block 0, op 1 (feed): expected each feed col once, got col 0 again "
    "[FEED_FETCH_INVALID]",
    "feeds-101": "program: expected at most 64 feed ops, got 101 [TOO_MANY_FEEDS]",
    "no-fetch": "program: expected at least one fetch op, got none [NO_FETCH]",
    "name-201-chars": "block 0: expected a name of 1..200 characters from [A-Za-z0-9_.@/:-], got "
    f"{'x' * 200 + '...'!r} (201 characters) [NAME_INVALID]",
    "dims-2-31-cubed": "block 0, var 'x': expected rank <= 64 and dims in [-1, 2147483647] with a "
    "byte size below 2**62, got [2147483648, 2147483648, 2147483648] [VAR_DIMS_INVALID]",
    "var-reader": "block 0, var 'xs': expected a dense tensor, got READER [VAR_TYPE]",
    "feed-100k-squared": "block 0, op 0 (feed): output 'x' float32[100000, 100000]: expected at "
    "most 2147483648 bytes, got 40000000000 [TENSOR_TOO_LARGE]",
    "tile-chain-on-empty-tensor": "block 0, op 2 (tile): output 'tile1' float32[0, "
    "4611686014132420609]: expected dims <= 2147483647, got 4611686014132420609 [TENSOR_TOO_LARGE]",
    "tile-chain-on-empty-at-max-batch": "block 0, op 1 (tile): output 'tile0' float32[68719476704, "
    "0] at batch 32: expected dims <= 2147483647, got 68719476704 [TENSOR_TOO_LARGE]",
    "flops-over-cap": "program: expected at most 2 FLOPs per sample, got 8 (at batch 32) "
    "[FLOPS_TOO_LARGE]",
    "elementwise-axis-out-of-range": "block 0, op 2 (elementwise_add): axis must be -1 or in "
    "[0, 1] for ranks 2 and 1, got 2 [AXIS_INVALID]",
    "elementwise-axis-from-var": "block 0, op 2 (elementwise_add): attribute 'axis': expected a "
    "constant value, got AttrType VAR (values computed from variables are not supported) "
    "[ATTR_TYPE]",
    "params-truncated": "var 'scale': tensor 1: expected 8 bytes of the LoD level, got 6 "
    "[PARAMS_TRUNCATED]",
    "params-desc-len-negative": "var 'bias': tensor 0: expected a description length in "
    "1..4096, got -1 [PARAMS_HEADER]",
    "params-dims-differ": "var 'bias': expected dims [4] as declared, got [2, 2] in the file "
    "[PARAMS_DIMS]",
    "params-trailing-byte": "program: expected the file to end after tensor 1, got 1 more bytes "
    "[PARAMS_TRAILING]",
    "params-one-tensor-too-few": "var 'scale': expected 2 tensors (one per persistable var), got "
    "1 [PARAMS_COUNT]",
    "params-version-1": "var 'bias': tensor 0: expected DenseTensor version 0, got 1 "
    "[PARAMS_HEADER]",
    "params-dtype-differs": "var 'bias': expected float32 as declared, got int64 in the file "
    "[PARAMS_DTYPE]",
    "params-missing": "program: expected a .pdiparams holding 2 tensors, got none [PARAMS_MISSING]",
    "reads-undefined-var": "block 0, op 4 (elementwise_add): reads 'ghost', which is not fed, a "
    "parameter, or written by an earlier op [VAR_UNDEFINED]",
    "writes-parameter": "block 0, op 4 (elementwise_add): writes 'scale', a persistable "
    "parameter; parameters are read-only [VAR_WRITES_PARAM]",
    "grad-op": "block 0, op 4 (relu_grad): expected inference ops only, got training op "
    "'relu_grad' [TRAINING_PROGRAM]",
    "forward-block-idx": "block 0: expected forward_block_idx -1 (inference), got 0 "
    "[TRAINING_PROGRAM]",
    "op-unknown": "block 0, op 4 (my_custom_op): expected a registered op type, got "
    "'my_custom_op' [OP_UNKNOWN]",
    "op-not-allowed": "block 0, op 2 (elementwise_add): op 'elementwise_add' is not allowed by "
    "this tenant's policy [OP_NOT_ALLOWED]",
    "slot-unknown": "block 0, op 2 (elementwise_add): expected input slots from ['X', 'Y'], got "
    "unknown 'Z' [SLOT_UNKNOWN]",
    "attr-unknown": "block 0, op 2 (elementwise_add): expected attributes from ['axis'], got "
    "unknown ['evil'] [ATTR_UNKNOWN]",
    "attr-wrong-type": "block 0, op 2 (elementwise_add): attribute 'axis': expected AttrType INT "
    "or LONG, got STRING [ATTR_TYPE]",
}


# -- the tests -----------------------------------------------------------------------------------


def rejection(make: Make) -> ValidationFailed:
    """validate() on the row's upload; any exception but ValidationFailed fails the test."""
    program, params_bytes, policy = make()
    args = (program, params_bytes) if policy is None else (program, params_bytes, policy)
    with pytest.raises(ValidationFailed) as info:
        validate(*args)
    return info.value


def param(r: Row) -> Any:
    marks = [pytest.mark.xfail(reason=r.gap, strict=True)] if r.gap else []
    return pytest.param(r, id=r.id, marks=marks)


@pytest.mark.parametrize("case", [param(r) for r in ROWS])
def test_bad_input_is_rejected_with_its_code(case: Row) -> None:
    failed = rejection(case.make)
    assert failed.diagnostics
    assert all(isinstance(d.code, Code) for d in failed.diagnostics)
    assert case.code in failed.codes, str(failed)
    if case.id in MESSAGES:
        assert MESSAGES[case.id] in [str(d) for d in failed.diagnostics], str(failed)


def test_row_ids_are_unique_and_messages_name_rows() -> None:
    ids = [r.id for r in ROWS]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []
    assert sorted(MESSAGES.keys() - set(ids)) == []


# Warnings are tested in tests/validator/test_validate.py and tests/executor/; the gate and
# lowering-bug codes come only from a graphgate bug in executor.compile(), tested in
# tests/executor/ (LOWERING_UNSUPPORTED is the validator's, and has rows).
WARNING_CODES = {
    Code.VAR_DIMS_MISMATCH,
    Code.BUDGET_UPPER_BOUND,
    Code.BUDGET_PINNED_DIMS,
    Code.DATA_DEPENDENT_SHAPE,
}
EXECUTOR_CODES = {Code.ONNX_GATE, Code.LOWERING_FAILED}
# Refusals of what an upload declares besides its bytes (`--dim NAME=SIZE`): tested in
# tests/conformance/test_symbolic_dims.py, on the program whose dims they name.
DECLARATION_CODES = {Code.DIM_DECLARATION}


def test_every_diagnostic_code_has_a_bad_input_row() -> None:
    untested = set(Code) - WARNING_CODES - EXECUTOR_CODES - DECLARATION_CODES
    assert sorted(untested - {r.code for r in ROWS}) == []


def test_one_op_gets_a_few_var_diagnostics_not_thousands() -> None:
    failed = rejection(many_reads(4000))
    assert len(failed.diagnostics) == 8
    assert str(failed.diagnostics[-1]) == (
        "block 0, op 4 (concat): reads 'g7', which is not fed, a parameter, or written by an "
        "earlier op [VAR_UNDEFINED]"
    )


def test_the_base_program_is_valid() -> None:
    program, params_bytes, _ = valid()
    assert validate(program, params_bytes).report.op_count == 4
