"""Control flow written by hand with graph_proto.builder in the shape Paddle 3.3.1 exports: a
while whose body rewrites its loop vars and recomputes the condition (`counting_loop`), cond as
two conditional_blocks and a select_input (`branch`); and BAD, those programs broken one way
each, with the diagnostic each must get (tests/validator/test_control_flow_bad.py checks them,
tests/support/bad_inputs.py lists them with every other bad input)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr, ProgramBuilder
from graph_proto.types import DType
from validator import Code, Policy

FP32, INT64, BOOL, INT32 = DType.FP32, DType.INT64, DType.BOOL, DType.INT32
STEP_SCOPES = pb.VarType.STEP_SCOPES


def fill(g: ProgramBuilder, out: str, dtype: DType, value: float, block: int = 0) -> None:
    g.op(
        "fill_constant",
        {},
        {"Out": [out]},
        {"dtype": int(dtype), "shape": Attr(pb.LONGS, []), "value": value},
        block=block,
    )


def counting_loop(
    *, cond_out: str = "c", body_assign_cond: bool = True, write_param: bool = False
) -> ProgramBuilder:
    """x fp32[2, 3], n int64[]: while i < n: i += 1; x = x * 0.5. Fetches i and x."""
    g = ProgramBuilder()
    g.feed("x", FP32, [2, 3])
    g.feed("n", INT64, [])
    g.param("w", np.ones((2, 3), np.float32))
    g.var("i", INT64, [])
    g.var("c", BOOL, [])
    g.var("scopes", None, vartype=STEP_SCOPES)
    fill(g, "i", INT64, 0.0)
    g.op("less_than", {"X": ["i"], "Y": ["n"]}, {"Out": ["c"]})
    body = g.add_block(0)
    g.var("half", FP32, [2, 3], block=body)
    g.var("c2", BOOL, [], block=body)
    g.op("while", {"X": ["i", "n", "x"], "Condition": ["c"]},
         {"Out": ["i", "x", "c"], "StepScopes": ["scopes"]},
         {"sub_block": Attr(pb.BLOCK, body), "is_test": True})  # fmt: skip
    g.op("increment", {"X": ["i"]}, {"Out": ["i"]}, {"step": 1.0}, block=body)
    g.op("scale", {"X": ["x"]}, {"Out": ["half"]}, {"scale": 0.5}, block=body)
    g.op("assign", {"X": ["half"]}, {"Out": ["w" if write_param else "x"]}, block=body)
    g.op("less_than", {"X": ["i"], "Y": ["n"]}, {"Out": ["c2"]}, block=body)
    if body_assign_cond:
        g.op("assign", {"X": ["c2"]}, {"Out": [cond_out]}, block=body)
    g.fetch("i")
    g.fetch("x")
    return g


def branch(*, guarded: bool = True, swapped: bool = False) -> ProgramBuilder:
    """What paddle.static.nn.cond exports: out = x + 1 if mean(x) > 0 else x * 2."""
    g = ProgramBuilder()
    g.feed("x", FP32, [-1, 4])
    for name, dtype, dims in [
        ("m", FP32, []), ("zero", FP32, []), ("p", BOOL, []), ("not_p", BOOL, []),
        ("mask", INT32, []), ("yes", FP32, [-1, 4]), ("no", FP32, [-1, 4]), ("out", FP32, [-1, 4]),
    ]:  # fmt: skip
        g.var(name, dtype, dims)
    g.var("s1", None, vartype=STEP_SCOPES)
    g.var("s2", None, vartype=STEP_SCOPES)
    g.op("reduce_mean", {"X": ["x"]}, {"Out": ["m"]}, {"dim": [], "reduce_all": True})
    fill(g, "zero", FP32, 0.0)
    g.op("greater_than", {"X": ["m"], "Y": ["zero"]}, {"Out": ["p"]})
    then_block, else_block = g.add_block(0), g.add_block(0)
    g.var("t1", FP32, [-1, 4], block=then_block)
    g.var("t2", FP32, [-1, 4], block=else_block)
    g.op("conditional_block", {"Cond": ["p"], "Input": ["x"]}, {"Out": ["yes"], "Scope": ["s1"]},
         {"sub_block": Attr(pb.BLOCK, then_block), "is_scalar_condition": True})  # fmt: skip
    g.op("scale", {"X": ["x"]}, {"Out": ["t1"]}, {"bias": 1.0}, block=then_block)
    g.op("assign", {"X": ["t1"]}, {"Out": ["yes"]}, block=then_block)
    g.op("logical_not", {"X": ["p"]}, {"Out": ["not_p"]})
    g.op("conditional_block", {"Cond": ["not_p"], "Input": ["x"]}, {"Out": ["no"], "Scope": ["s2"]},
         {"sub_block": Attr(pb.BLOCK, else_block), "is_scalar_condition": True})  # fmt: skip
    g.op("scale", {"X": ["x"]}, {"Out": ["t2"]}, {"scale": 2.0}, block=else_block)
    g.op("assign", {"X": ["t2"]}, {"Out": ["no"]}, block=else_block)
    g.op("cast", {"X": ["p"]}, {"Out": ["mask"]}, {"in_dtype": int(BOOL), "out_dtype": int(INT32)})
    picks = ["yes", "no"] if swapped else ["no", "yes"]
    g.op("select_input", {"Mask": ["mask"], "X": picks}, {"Out": ["out"]})
    g.fetch("out" if guarded else "yes")
    return g


@dataclass(frozen=True)
class Bad:
    make: Callable[[], ProgramBuilder]
    code: Code
    message: str  # the whole message of the first diagnostic
    policy: Policy | None = None


def _loop_reading_undefined() -> ProgramBuilder:
    g = counting_loop()
    g.var("ghost", FP32, [2, 3], block=1)
    g.block(1).ops[1].inputs[0].arguments[:] = ["ghost"]  # scale reads a var nobody writes
    return g


def _cond_referencing_its_own_block() -> ProgramBuilder:
    g = branch()
    inner = g.block(1).ops.add()
    inner.CopyFrom(g.block(0).ops[4])  # the conditional_block, now inside its own sub-block
    return g


def _cond_referencing_block_zero() -> ProgramBuilder:
    g = branch()
    g.block(0).ops[4].attrs[0].block_idx = 0
    return g


def _forever() -> ProgramBuilder:
    """A condition known to be true, reassigned true by the body: it never stops."""
    g = counting_loop(body_assign_cond=False)
    g.var("yes", BOOL, [], block=1)
    fill(g, "yes", BOOL, 1.0, block=1)
    g.op("assign", {"X": ["yes"]}, {"Out": ["c"]}, block=1)
    fill(g, "c", BOOL, 1.0)
    g.block(0).ops.insert(4, g.block(0).ops.pop())  # the fill before the while
    del g.block(0).ops[3]  # the less_than it replaces
    return g


def _loop_changing_rank() -> ProgramBuilder:
    g = counting_loop()
    g.var("flat", FP32, [6], block=1)
    g.op("reshape2", {"X": ["half"]}, {"Out": ["flat"]}, {"shape": [6]}, block=1)
    g.block(1).ops.insert(2, g.block(1).ops.pop())
    g.block(1).ops[3].inputs[0].arguments[:] = ["flat"]  # x = reshape(x * 0.5, [6])
    return g


def _loop_var_undefined_before() -> ProgramBuilder:
    g = counting_loop()
    g.var("acc", FP32, [2, 3])
    g.block(0).ops[4].outputs[0].arguments.append("acc")
    g.op("assign", {"X": ["half"]}, {"Out": ["acc"]}, block=1)
    return g


def _body_writes_unlisted() -> ProgramBuilder:
    g = counting_loop()
    del g.block(0).ops[4].outputs[0].arguments[1]  # Out no longer lists x
    return g


def _cond_out_never_written() -> ProgramBuilder:
    g = branch()
    del g.block(1).ops[1]  # the then-branch computes t1 but never assigns yes
    return g


def _shadowing() -> ProgramBuilder:
    g = counting_loop()
    g.var("x", FP32, [2, 3], block=1)
    return g


def _mask_not_a_condition() -> ProgramBuilder:
    g = branch()
    g.var("k", INT32, [])
    fill(g, "k", INT32, 3.0)
    select = g.block(0).ops[7]
    g.block(0).ops.insert(7, g.block(0).ops.pop())
    select.inputs[0].arguments[:] = ["k"]
    return g


def _nested_too_deep() -> ProgramBuilder:
    g = branch()
    nested = g.add_block(1)
    g.var("deep", FP32, [-1, 4], block=nested)
    cond_op = g.block(1).ops.add()
    cond_op.CopyFrom(g.block(0).ops[4])
    cond_op.attrs[0].block_idx = nested
    return g


def as_upload(bad: Bad) -> tuple[bytes, bytes | None, Policy | None]:
    """(program, params, policy) for tests/validator/test_bad_input.py's catalogue."""
    g = bad.make()
    return g.program_bytes(), g.params_bytes(), bad.policy


def _increment_of_a_param() -> ProgramBuilder:
    g = counting_loop()
    g.op("increment", {"X": ["w"]}, {"Out": ["w"]}, {"step": 1.0})
    g.block(0).ops.insert(2, g.block(0).ops.pop())
    return g


def _range_to_a_fed_bound_in_a_loop() -> ProgramBuilder:
    g = counting_loop()
    for name in ("zero", "one", "steps"):
        g.var(name, INT64, [] if name != "steps" else [-1], block=1)
    fill(g, "zero", INT64, 0.0, block=1)
    fill(g, "one", INT64, 1.0, block=1)
    g.op("range", {"Start": ["zero"], "End": ["n"], "Step": ["one"]}, {"Out": ["steps"]}, block=1)
    return g


BAD = {
    "loop-no-bound-in-policy": Bad(
        counting_loop,
        Code.LOOP_UNBOUNDED,
        "expected a loop trip bound from the tenant policy, got none (loops are not allowed)",
        Policy(max_loop_trips=None),
    ),
    "loop-never-recomputes-condition": Bad(
        lambda: counting_loop(body_assign_cond=False),
        Code.LOOP_UNBOUNDED,
        "expected sub-block 1 to recompute the condition 'c', got no write to it",
    ),
    "loop-bound-over-policy": Bad(
        _forever,
        Code.LOOP_BOUND_OVER_POLICY,
        "expected at most 7 iterations (the policy's bound), got a condition known at compile "
        "time to hold for at least 8",
        Policy(max_loop_trips=7),
    ),
    "sub-block-writes-param": Bad(
        lambda: counting_loop(write_param=True),
        Code.SUB_BLOCK_WRITES_PARAM,
        "writes 'w', a persistable parameter, from sub-block 1; parameters are read-only",
    ),
    "increment-in-place-of-a-param": Bad(
        _increment_of_a_param,
        Code.VAR_WRITES_PARAM,
        "writes 'w', a persistable parameter; parameters are read-only",
    ),
    "sub-block-reads-undefined": Bad(
        _loop_reading_undefined,
        Code.VAR_UNDEFINED,
        "reads 'ghost', which is not fed, a parameter, or written by an earlier op in this block "
        "or an enclosing one",
    ),
    "sub-block-references-itself": Bad(
        _cond_referencing_its_own_block,
        Code.BLOCK_CYCLE,
        "attribute 'sub_block': block 1 is this op's own block or an ancestor of it",
    ),
    "sub-block-references-block-0": Bad(
        _cond_referencing_block_zero,
        Code.BLOCK_CYCLE,
        "attribute 'sub_block': block 0 is this op's own block or an ancestor of it",
    ),
    "sub-block-writes-unlisted-outer-var": Bad(
        _body_writes_unlisted,
        Code.SUB_BLOCK_OUTPUTS,
        "writes 'x' of block 0, which op 4 (while) does not list in Out",
    ),
    "cond-out-never-written": Bad(
        _cond_out_never_written,
        Code.SUB_BLOCK_OUTPUTS,
        "Out lists 'yes', but sub-block 1 never writes it",
    ),
    "loop-var-undefined-before-loop": Bad(
        _loop_var_undefined_before,
        Code.VAR_UNDEFINED,
        "loop var 'acc' is not defined before the while; expected a value for the first iteration",
    ),
    "loop-var-changes-rank": Bad(
        _loop_changing_rank,
        Code.LOOP_CARRIED_TYPE,
        "loop var 'x': expected float32[2, 3] on every iteration, got float32[6] after one",
    ),
    "branch-output-fetched-unguarded": Bad(
        lambda: branch(guarded=False),
        Code.BRANCH_OUTPUT_UNGUARDED,
        "reads 'yes', which conditional_block writes only when 'p' is True; expected a "
        "select_input picking it on that condition",
    ),
    "select-input-picks-the-wrong-branch": Bad(
        lambda: branch(swapped=True),
        Code.BRANCH_OUTPUT_UNGUARDED,
        "reads 'yes', which conditional_block writes only when 'p' is True; expected a "
        "select_input picking it on that condition",
    ),
    "select-input-mask-not-a-condition": Bad(
        _mask_not_a_condition,
        Code.BRANCH_OUTPUT_UNGUARDED,
        "expected a Mask cast to int32 from a boolean condition, so that it is 0 or 1",
    ),
    "sub-block-sized-by-data": Bad(
        _range_to_a_fed_bound_in_a_loop,
        Code.SUB_BLOCK_DATA_DEPENDENT,
        "output 'steps' int64[-1] in block 1 is sized by input data; expected sizes fixed by "
        "shapes and constants inside loops and branches",
    ),
    "sub-block-var-shadows-outer": Bad(
        _shadowing,
        Code.NAME_INVALID,
        "expected names distinct from those of enclosing blocks, got one block 0 declares too",
    ),
    "nesting-over-policy": Bad(
        _nested_too_deep,
        Code.NESTING_TOO_DEEP,
        "expected nesting depth <= 1, got 2",
        Policy(max_nesting=1),
    ),
}
