"""Diagnostics: stable codes, one record per problem, and the one exception validate() raises."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


class Code(enum.StrEnum):
    """Stable diagnostic codes; the README lists each with its meaning (a test keeps them in sync)."""

    def __new__(cls, value: str, meaning: str) -> Code:
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    meaning: str

    # Bytes and protobuf structure of the .pdmodel.
    PROGRAM_EMPTY = "PROGRAM_EMPTY", "the .pdmodel file has no bytes"
    PROGRAM_TOO_LARGE = (
        "PROGRAM_TOO_LARGE",
        "the .pdmodel is over the policy's byte cap; not parsed",
    )
    PROGRAM_MALFORMED = "PROGRAM_MALFORMED", "the bytes are not a ProgramDesc protobuf"
    PROGRAM_MISSING_FIELD = "PROGRAM_MISSING_FIELD", "a required protobuf field is absent"
    PROGRAM_UNKNOWN_FIELD = (
        "PROGRAM_UNKNOWN_FIELD",
        "a protobuf field or enum value Paddle does not define",
    )
    PROGRAM_TOO_COMPLEX = "PROGRAM_TOO_COMPLEX", "too many blocks, vars, attrs or list items"
    # PIR programs (Paddle 3's JSON program format).
    PIR_DIALECT_UNKNOWN = (
        "PIR_DIALECT_UNKNOWN",
        "a PIR op names a dialect other than builtin, pd_op and cf",
    )
    PIR_VALUE_UNDEFINED = (
        "PIR_VALUE_UNDEFINED",
        "a PIR op reads a value id that no earlier op or enclosing block defines",
    )
    PIR_UNSUPPORTED = (
        "PIR_UNSUPPORTED",
        "a PIR construct with no equivalent in graphgate's op declarations (a computed tensor "
        "where a constant attribute is needed, a vector result of an unmapped op)",
    )
    # Blocks and control structure.
    BLOCK_INDEX = "BLOCK_INDEX", "blocks[i].idx != i, or parent_idx out of range"
    BLOCK_CYCLE = "BLOCK_CYCLE", "parent_idx or sub-block references form a cycle"
    BLOCK_REFERENCE = (
        "BLOCK_REFERENCE",
        "a sub_block attribute names a block that does not exist or belong there",
    )
    BLOCK_UNREFERENCED = "BLOCK_UNREFERENCED", "a sub-block that no op owns"
    NESTING_TOO_DEEP = "NESTING_TOO_DEEP", "sub-blocks nest deeper than the policy allows"
    SUB_BLOCK_WRITES_PARAM = (
        "SUB_BLOCK_WRITES_PARAM",
        "an op inside a sub-block writes a persistable variable (a parameter)",
    )
    SUB_BLOCK_OUTPUTS = (
        "SUB_BLOCK_OUTPUTS",
        "a sub-block writes an enclosing block's variable its owner op does not list in Out, "
        "or never writes one that Out lists",
    )
    BRANCH_OUTPUT_UNGUARDED = (
        "BRANCH_OUTPUT_UNGUARDED",
        "a conditional_block output is read where its branch may not have run (only a "
        "select_input whose Mask is cast from that branch's condition may read it)",
    )
    LOOP_UNBOUNDED = (
        "LOOP_UNBOUNDED",
        "a while loop with no trip bound: the tenant policy sets none, or the body never "
        "recomputes the condition",
    )
    LOOP_BOUND_OVER_POLICY = (
        "LOOP_BOUND_OVER_POLICY",
        "a while loop whose condition, known at compile time, keeps it running past the "
        "policy's trip bound",
    )
    SUB_BLOCK_DATA_DEPENDENT = (
        "SUB_BLOCK_DATA_DEPENDENT",
        "a tensor inside a sub-block is sized by input data (a range to a fed bound): unlike "
        "one in block 0 it cannot be checked against the byte cap before running, so it is "
        "refused",
    )
    LOOP_CARRIED_TYPE = (
        "LOOP_CARRIED_TYPE",
        "a loop-carried variable changes dtype or rank from one iteration to the next",
    )
    TRAINING_PROGRAM = "TRAINING_PROGRAM", "grad or optimizer ops, @GRAD vars or a backward block"
    # Operators.
    OP_FORBIDDEN = (
        "OP_FORBIDDEN",
        "the op touches files, network, devices or user code; never allowed",
    )
    OP_UNKNOWN = "OP_UNKNOWN", "the op type is not registered in graphgate"
    OP_NOT_ALLOWED = (
        "OP_NOT_ALLOWED",
        "the op is registered but the tenant policy does not allow it",
    )
    TOO_MANY_OPS = "TOO_MANY_OPS", "more ops than the policy allows"
    SLOT_UNKNOWN = "SLOT_UNKNOWN", "an input or output slot the op does not have"
    SLOT_MISSING = "SLOT_MISSING", "a required input or output slot is absent or empty"
    SLOT_ARITY = "SLOT_ARITY", "a slot holds more variables than the op accepts"
    ATTR_UNKNOWN = "ATTR_UNKNOWN", "an attribute the op does not have"
    ATTR_MISSING = "ATTR_MISSING", "a required attribute is absent"
    ATTR_TYPE = "ATTR_TYPE", "an attribute has the wrong AttrType"
    ATTR_VALUE = "ATTR_VALUE", "an attribute value is out of range or inconsistent"
    AXIS_INVALID = "AXIS_INVALID", "an axis or rank is out of range for the input"
    SHAPE_MISMATCH = (
        "SHAPE_MISMATCH",
        "input shapes are inconsistent with each other or the attributes",
    )
    DIM_DECLARATION = (
        "DIM_DECLARATION",
        "an upload's declared size for an unknown dim (`--dim NAME=SIZE`, the `dims` form "
        "field) names no unknown dim, names the batch, or is out of range",
    )
    EMPTY_DIM = "EMPTY_DIM", "a zero-size dimension where the op needs elements (would divide by 0)"
    DTYPE_MISMATCH = "DTYPE_MISMATCH", "an input dtype is not accepted or differs from its peer"
    # Variables.
    VAR_UNDEFINED = (
        "VAR_UNDEFINED",
        "an op reads a variable that is neither fed, a parameter, nor written before",
    )
    VAR_UNDECLARED = "VAR_UNDECLARED", "an op writes a variable that has no VarDesc"
    VAR_REDEFINED = "VAR_REDEFINED", "a variable is written twice"
    VAR_WRITES_PARAM = "VAR_WRITES_PARAM", "an op writes a persistable variable (a parameter)"
    VAR_READS_UNUSED = "VAR_READS_UNUSED", "an op reads a training-only output such as XShape"
    VAR_TYPE = (
        "VAR_TYPE",
        "a variable of a kind graphgate does not run (reader, raw, selected rows...)",
    )
    VAR_DIMS_INVALID = (
        "VAR_DIMS_INVALID",
        "a stored dim below -1, absurdly large, or overflowing int64",
    )
    VAR_DIMS_MISMATCH = (
        "VAR_DIMS_MISMATCH",
        "warning: the dims stored in an intermediate VarDesc contradict the inferred ones "
        "(Paddle ignores them too; the inferred ones are used)",
    )
    VAR_DTYPE_MISMATCH = (
        "VAR_DTYPE_MISMATCH",
        "the dtype stored in a VarDesc contradicts the inferred one",
    )
    NAME_INVALID = (
        "NAME_INVALID",
        "a variable name is empty, too long, or has characters outside the allowed set",
    )
    # Feed and fetch.
    FEED_FETCH_INVALID = (
        "FEED_FETCH_INVALID",
        "feed/fetch misuse: col not 0..n-1, duplicate, wrong holder",
    )
    TOO_MANY_FEEDS = "TOO_MANY_FEEDS", "more feeds or fetches than the policy allows"
    NO_FETCH = "NO_FETCH", "the program has no fetch op, so it computes nothing"
    # Parameters (.pdiparams).
    PARAMS_MISSING = (
        "PARAMS_MISSING",
        "the program has persistable vars but no .pdiparams was given",
    )
    PARAMS_UNEXPECTED = (
        "PARAMS_UNEXPECTED",
        "a .pdiparams was given but the program has no persistable vars",
    )
    PARAMS_TRUNCATED = "PARAMS_TRUNCATED", "the .pdiparams ends inside a tensor"
    PARAMS_TRAILING = "PARAMS_TRAILING", "bytes left after the last expected tensor"
    PARAMS_HEADER = "PARAMS_HEADER", "a tensor header has a bad version, LoD or description length"
    PARAMS_DTYPE = "PARAMS_DTYPE", "a tensor's dtype is unsupported or differs from its VarDesc"
    PARAMS_DIMS = "PARAMS_DIMS", "a tensor's dims are invalid or differ from its VarDesc"
    PARAMS_COUNT = "PARAMS_COUNT", "the file holds fewer tensors than persistable vars"
    # Budgets.
    TENSOR_TOO_LARGE = "TENSOR_TOO_LARGE", "one tensor is over the policy's byte cap"
    PARAMS_TOO_LARGE = "PARAMS_TOO_LARGE", "the parameters together are over the policy's byte cap"
    ACTIVATIONS_TOO_LARGE = (
        "ACTIVATIONS_TOO_LARGE",
        "peak live activation bytes per sample over the cap",
    )
    FLOPS_TOO_LARGE = "FLOPS_TOO_LARGE", "FLOPs per sample over the policy's cap"
    LOWERING_UNSUPPORTED = (
        "LOWERING_UNSUPPORTED",
        "an op or attribute value the ONNX lowering cannot compute exactly (never approximated)",
    )
    LOWERING_FAILED = (
        "LOWERING_FAILED",
        "a graphgate bug: the lowering of an op that passed validation failed; refused, with "
        "the op's location",
    )
    RNN_UNSUPPORTED = (
        "RNN_UNSUPPORTED",
        "an rnn variant graphgate cannot reproduce exactly (training dropout, float64)",
    )
    ONNX_GATE = (
        "ONNX_GATE",
        "the lowered ONNX model breaks a rule of the ONNX gate (a graphgate bug, refused)",
    )
    DATA_DEPENDENT_SHAPE = (
        "DATA_DEPENDENT_SHAPE",
        "warning: a tensor's size comes from input data (range bounds, fill shapes); the "
        "executor checks it against the byte cap per request, before running",
    )
    BUDGET_UPPER_BOUND = (
        "BUDGET_UPPER_BOUND",
        "warning: cost figures are upper bounds (the program pins dynamic dims to sizes that no "
        "one binding meets)",
    )
    BUDGET_PINNED_DIMS = (
        "BUDGET_PINNED_DIMS",
        "warning: cost figures are taken with the dynamic dims at the size the program pins "
        "them to (max_dynamic_dim contradicts it, e.g. a fixed 128-position mask)",
    )


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a program; `message` says what was expected and what was received."""

    code: Code
    message: str
    severity: Severity = Severity.ERROR
    block: int | None = None
    op_index: int | None = None
    op_type: str | None = None
    var: str | None = None

    def __str__(self) -> str:
        return f"{self.location()}: {self.message} [{self.code}]"

    def location(self) -> str:
        if self.op_index is not None:
            return f"block {self.block or 0}, op {self.op_index} ({self.op_type})"
        if self.var is not None:
            where = f"block {self.block}, " if self.block is not None else ""
            return f"{where}var {self.var!r}"
        if self.block is not None:
            return f"block {self.block}"
        return "program"

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, enum.Enum) else v) for k, v in asdict(self).items()}


class ValidationFailed(Exception):
    """The program is rejected; `diagnostics` lists every problem found, in program order."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        super().__init__("\n".join(map(str, diagnostics)))
        self.diagnostics = tuple(diagnostics)

    @property
    def codes(self) -> list[str]:
        return [str(d.code) for d in self.diagnostics]
