"""Every hostile .pdmodel/.pdiparams (threats.md section 7) with the diagnostic code it must
get: ROWS, each (id, expected code, a function making the upload, a known gap if any).
tests/validator/test_bad_input.py validates them; tests/test_check_equals_upload.py sends them
through `graphgate check`, /v1/check and /v1/models."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr
from graph_proto.builder import set_attr as fill_attr
from graph_proto.pdiparams import write_params
from graph_proto.types import DType
from tests.support import control_flow
from tests.support.builders import FP32, POOL2D_ATTRS, GraphBuilder, V, affine, varint, weights
from validator import Code, Policy

Upload = tuple[bytes, bytes | None, Policy | None]
Make = Callable[[], Upload]
VT = pb.VarType
INT64 = DType.INT64
INT32_MAX = 2**31 - 1
ADD = "elementwise_add"
Z = {"Out": [V("z", [-1, 4])]}


@dataclass(frozen=True)
class Row:
    id: str
    code: Code
    make: Make
    gap: str | None = None  # a known gap: the row is expected to fail until it is closed


ROWS: list[Row] = []


def add(id: str, code: Code, make: Make, gap: str | None = None) -> None:
    ROWS.append(Row(id, code, make, gap))


def row(id: str, code: Code) -> Callable[[Make], Make]:
    """Registers the decorated upload factory as a row."""

    def register(make: Make) -> Make:
        add(id, code, make)
        return make

    return register


# -- ways to make an upload ----------------------------------------------------------------------
# affine(): ops 0 feed(x) 1 elementwise_mul(x, scale)->xs 2 elementwise_add(xs, bias)->y 3 fetch(y);
# params bias, scale: fp32[4] each.


def upload(g: GraphBuilder, policy: Policy | None = None) -> Upload:
    return g.program_bytes(), g.params_bytes(), policy


def valid() -> Upload:
    return upload(affine())


def edited(edit: Callable[[GraphBuilder], object], policy: Policy | None = None) -> Make:
    """affine() with one edit to its builder."""

    def make() -> Upload:
        g = affine()
        edit(g)
        return upload(g, policy)

    return make


def with_policy(policy: Policy) -> Make:
    return edited(lambda g: None, policy)


def op_edit(index: int, edit: Callable[[pb.OpDesc], object]) -> Make:
    return edited(lambda g: edit(g.block(0).ops[index]))


def extra_op(
    op_type: str, inputs: dict[str, list[str]], outputs: dict[str, list[V | str]], **attrs: Any
) -> Make:
    """affine() plus one op appended after the fetch."""
    return edited(lambda g: g.node(op_type, inputs, outputs, attrs))


def program_bytes(edit: Callable[[bytes], bytes]) -> Make:
    """affine()'s .pdmodel bytes edited, its params kept."""

    def make() -> Upload:
        program, params, _ = valid()
        return edit(program), params, None

    return make


def merged(path: Callable[[GraphBuilder], Any], wire: bytes) -> Make:
    """Merges raw wire bytes (an unknown field or enum value) into one sub-message of affine()."""
    return edited(lambda g: path(g).MergeFromString(wire))


def cleared(path: Callable[[GraphBuilder], Any], field: str) -> Make:
    def make() -> Upload:
        g = affine()
        path(g).ClearField(field)
        return g.program.SerializePartialToString(), g.params_bytes(), None

    return make


def ops_of(g: GraphBuilder, op_type: str) -> list[pb.OpDesc]:
    return [op for op in g.block(0).ops if op.type == op_type]


def var_of(g: GraphBuilder, name: str) -> pb.VarDesc:
    return next(v for v in g.block(0).vars if v.name == name)


def set_attr(op: pb.OpDesc, name: str, value: Any) -> None:
    """Replaces (or adds) one attribute of an op."""
    kept = [a for a in op.attrs if a.name != name]
    del op.attrs[:]
    op.attrs.extend(kept)
    fill_attr(op.attrs.add(), name, value)


def one_op(
    op_type: str,
    x_dims: Sequence[int],
    attrs: dict[str, Any],
    out_dims: Sequence[int] = (-1,),
    *,
    inputs: dict[str, list[str]] | None = None,
    outputs: dict[str, list[V]] | None = None,
    out_dtype: DType = FP32,
) -> Make:
    """feed x -> op_type(X=x) -> fetch its first output."""

    def make() -> Upload:
        g = GraphBuilder()
        x = g.feed("x", FP32, x_dims)
        outs = outputs or {"Out": [V("out", out_dims, out_dtype)]}
        g.node(op_type, {"X": [x], **(inputs or {})}, outs, attrs)
        g.fetch(next(iter(outs.values()))[0].name)
        return upload(g)

    return make


def feeding(name: str, dims: Sequence[int], policy: Policy | None = None) -> Make:
    """feed `name` -> elementwise_add(x, x) -> fetch: no parameters."""

    def make() -> Upload:
        g = GraphBuilder()
        x = g.feed(name, FP32, dims)
        g.node(ADD, {"X": [x], "Y": [x]}, {"Out": [V("z", dims)]})
        g.fetch("z")
        return upload(g, policy)

    return make


# -- 7.1 garbage, empty, truncated and over-cap .pdmodel bytes -----------------------------------

add("program-empty", Code.PROGRAM_EMPTY, lambda: (b"", None, None))
add("program-garbage-ff", Code.PROGRAM_MALFORMED, lambda: (b"\xff" * 64, None, None))
add("program-garbage-text", Code.PROGRAM_MALFORMED, lambda: (b"not a model\n", None, None))
add("program-garbage-random", Code.PROGRAM_MALFORMED, lambda: (np.random.default_rng(7).bytes(4096), None, None))  # fmt: skip
add("program-pbtxt", Code.PROGRAM_MALFORMED, lambda: (str(affine().program).encode(), None, None))

# PIR programs (Paddle 3's model.json); the reader's own suite is tests/graph_proto/test_pir.py.
_PIR_DATA = Path(__file__).parents[1] / "graph_proto" / "data"


def _pir(old: bytes, new: bytes) -> Upload:
    program = (_PIR_DATA / "pir_cnn.json").read_bytes()
    assert old in program
    return program.replace(old, new, 1), (_PIR_DATA / "pir_cnn.pdiparams").read_bytes(), None


add("pir-dialect-unknown", Code.PIR_DIALECT_UNKNOWN, lambda: _pir(b'"#":"1.relu"', b'"#":"7.relu"'))  # fmt: skip
add("pir-value-undefined", Code.PIR_VALUE_UNDEFINED, lambda: _pir(b'"I":[{"%":14}]', b'"I":[{"%":999}]'))  # fmt: skip
add("pir-constant-computed", Code.PIR_UNSUPPORTED, lambda: _pir(b'"#":"1.add","A":[],"I":[{"%":25},{"%":26}]', b'"#":"1.scale","A":[],"I":[{"%":26},{"%":25}]'))  # fmt: skip
# The reader's holes a hostile tenant found: an unterminated run of escaped quotes (the structure
# scan once retried from every quote: 108 s); a `full` folded into an attribute whose declared
# dims hold 2^124 or 10^9 elements (once an OverflowError, or built in memory); an operand of a
# `full` that nothing defines (once accepted, since full reads none).
_PIR_FULL = b'"#":"1.full","A":[{"AT":{"#":"1.a_intarray","D":[1]},"N":"shape"},{"AT":{"#":"0.a_f64","D":2.0},"N":"value"},{"AT":{"#":"1.a_dtype","D":"float32"},"N":"dtype"},{"AT":{"#":"1.a_place","D":[0,0,""]},"N":"place"}],"I":[]'  # fmt: skip


def _pir_scale_by_full(dims: bytes) -> Upload:
    """pir_cnn with its `add(%25, full %26)` made `scale(%25, %26)`: the full folds into the
    scale attribute, declared with `dims`."""
    program, params, _ = _pir(b'"#":"1.add","A":[],"I":[{"%":25},{"%":26}]', b'"#":"1.scale","A":[],"I":[{"%":25},{"%":26}]')  # fmt: skip
    old = b'"O":[{"%":26,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[1],'
    assert old in program
    new = b'"O":[{"%":26,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},' + dims + b","
    return program.replace(old, new, 1), params, None


add("pir-json-escaped-quotes", Code.PROGRAM_MALFORMED, lambda: (b'{"a":"' + b'\\"' * 80_000, None, None))  # fmt: skip
add("pir-full-folded-overflow", Code.PROGRAM_TOO_COMPLEX, lambda: _pir_scale_by_full(b"[4611686018427387904,4611686018427387904]"))  # fmt: skip
add("pir-full-folded-huge", Code.PROGRAM_TOO_COMPLEX, lambda: _pir_scale_by_full(b"[1000000000]"))  # fmt: skip
add("pir-full-operand-undefined", Code.PIR_VALUE_UNDEFINED, lambda: _pir(_PIR_FULL, _PIR_FULL[:-2] + b'[{"%":999}]'))  # fmt: skip
add("pir-full-operand-defined", Code.PIR_UNSUPPORTED, lambda: _pir(_PIR_FULL, _PIR_FULL[:-2] + b'[{"%":25}]'))  # fmt: skip
add("program-json", Code.PROGRAM_MALFORMED, lambda: (b'{"blocks": [{"idx": 0}]}', None, None))
add("program-truncated-half", Code.PROGRAM_MALFORMED, program_bytes(lambda b: b[: len(b) // 2]))
add("program-truncated-1", Code.PROGRAM_MALFORMED, program_bytes(lambda b: b[:-1]))
add("program-over-cap", Code.PROGRAM_TOO_LARGE, lambda: (bytes(64 * 1024 * 1024 + 1), None, None))
add("program-over-policy-cap", Code.PROGRAM_TOO_LARGE, with_policy(Policy(max_program_bytes=64)))
add("program-invalid-utf8", Code.PROGRAM_MALFORMED, program_bytes(lambda b: b.replace(b"add", b"\xff\xfe\xfd")))  # fmt: skip

# -- 7.2 missing required fields, unknown fields and enum values, group nesting ------------------

add("missing-block-idx", Code.PROGRAM_MISSING_FIELD, cleared(lambda g: g.block(0), "idx"))
add("missing-var-type", Code.PROGRAM_MISSING_FIELD, cleared(lambda g: g.block(0).vars[1], "type"))
add("missing-op-type", Code.PROGRAM_MISSING_FIELD, cleared(lambda g: g.block(0).ops[1], "type"))
add("missing-attr-type", Code.PROGRAM_MISSING_FIELD, cleared(lambda g: g.block(0).ops[0].attrs[0], "type"))  # fmt: skip
add("missing-data-type", Code.PROGRAM_MISSING_FIELD, cleared(lambda g: var_of(g, "x").type.dense_tensor.tensor, "data_type"))  # fmt: skip
add("unknown-field-program", Code.PROGRAM_UNKNOWN_FIELD, program_bytes(lambda b: b + b"\xf8\x06\x01"))  # fmt: skip
add("unknown-field-op", Code.PROGRAM_UNKNOWN_FIELD, merged(lambda g: g.block(0).ops[1], b"\xc8\x01\x2a"))  # fmt: skip
add("unknown-field-var", Code.PROGRAM_UNKNOWN_FIELD, merged(lambda g: g.block(0).vars[1], b"\x42\x03abc"))  # fmt: skip
add("unknown-enum-var-type", Code.PROGRAM_UNKNOWN_FIELD, merged(lambda g: g.block(0).vars[1].type, b"\x08\x63"))  # fmt: skip
add("unknown-enum-attr-type", Code.PROGRAM_UNKNOWN_FIELD, merged(lambda g: g.block(0).ops[0].attrs[0], b"\x10\x63"))  # fmt: skip
add("unknown-enum-data-type", Code.PROGRAM_UNKNOWN_FIELD, merged(lambda g: var_of(g, "x").type.dense_tensor.tensor, b"\x08\x63"))  # fmt: skip
# CVE-2025-4565: series of SGROUP tags (field 9, wire type 3); shallow ones are unknown fields,
# deep ones hit upb's recursion limit. Never a RecursionError.
add("sgroup-shallow", Code.PROGRAM_UNKNOWN_FIELD, program_bytes(lambda b: b + b"\x4b" * 50 + b"\x4c" * 50))  # fmt: skip
add("sgroup-100k-deep", Code.PROGRAM_MALFORMED, program_bytes(lambda b: b + b"\x4b" * 100_000 + b"\x4c" * 100_000))  # fmt: skip
add("sgroup-unterminated", Code.PROGRAM_MALFORMED, lambda: (b"\x4b" * 1_000_000, None, None))


@row("sgroup-deep-inside-op", Code.PROGRAM_MALFORMED)
def _deep_group_in_op() -> Upload:
    # A length-delimited OpDesc hides 5000 nested groups from any outer depth count.
    g = affine()
    op = g.block(0).ops[1].SerializeToString() + b"\x4b" * 5000 + b"\x4c" * 5000
    block = g.block(0).SerializeToString() + b"\x22" + varint(len(op)) + op
    return b"\x0a" + varint(len(block)) + block, g.params_bytes(), None


# -- 3.1 amplification: many small messages cost Python time and memory per message ------------


def block_of(ops: bytes, count: int = 1) -> Make:
    """A program of `count` blocks whose first one holds these raw OpDesc entries."""
    block = pb.BlockDesc(idx=0, parent_idx=-1).SerializeToString() + ops
    empty = b"\x0a\x04\x08\x00\x10\x00" * (count - 1)
    return lambda: (b"\x0a" + varint(len(block)) + block + empty, None, None)


def many_reads(count: int) -> Make:
    return extra_op("concat", {"X": [f"g{i}" for i in range(count)]}, Z, axis=1)


add("million-empty-ops", Code.PROGRAM_MISSING_FIELD, block_of(b"\x22\x00" * 1_000_000))
add("ops-200k", Code.TOO_MANY_OPS, block_of(b"\x22\x03\x1a\x01a" * 200_000))
add("blocks-100k", Code.PROGRAM_TOO_COMPLEX, block_of(b"", 100_000))
add("op-reads-a-million-vars", Code.PROGRAM_TOO_COMPLEX, many_reads(1_000_000))
add("op-reads-4000-undefined-vars", Code.VAR_UNDEFINED, many_reads(4000))


# -- 7.3 / 7.4 / 7.5 block indices, cycles and nesting -------------------------------------------


def control(g: GraphBuilder, block: int, target: int, op_type: str = "conditional_block") -> None:
    g.op(op_type, {}, {}, {"sub_block": Attr(pb.BLOCK, target)}, block=block)


def sub_blocks(*links: tuple[int, int], parents: Sequence[int] = (0,)) -> Make:
    """affine() with sub-blocks of the given parents, and (owner block, target) control ops."""

    def edit(g: GraphBuilder) -> None:
        for parent in parents:
            g.add_block(parent)
        for i, (owner, target) in enumerate(links):
            control(g, owner, target, "while" if i % 2 else "conditional_block")

    return edited(edit)


def blocks_edit(edit: Callable[[pb.ProgramDesc], None]) -> Make:
    """affine() with two well-formed sub-blocks, then `edit` on the ProgramDesc."""

    def make() -> Upload:
        g = affine()
        for target in (g.add_block(0), g.add_block(0)):
            control(g, 0, target)
        edit(g.program)
        return upload(g)

    return make


def block_field(index: int, field: str, value: int) -> Make:
    return blocks_edit(lambda p: setattr(p.blocks[index], field, value))


def _parent_cycle(p: pb.ProgramDesc) -> None:
    p.blocks[1].parent_idx, p.blocks[2].parent_idx = 2, 1


def nested(depth: int, policy: Policy | None = None) -> Make:
    """while/conditional_block nested `depth` deep, each body owning the next."""
    make = sub_blocks(*((i, i + 1) for i in range(depth)), parents=range(depth))
    return lambda: (*make()[:2], policy)


add("block-idx-99", Code.BLOCK_REFERENCE, sub_blocks((0, 99)))
add("block-idx-minus-5", Code.BLOCK_REFERENCE, sub_blocks((0, -5)))
add("block-idx-int32-max", Code.BLOCK_REFERENCE, sub_blocks((0, INT32_MAX)))
add("blocks-attr-99", Code.BLOCK_REFERENCE, edited(lambda g: (g.add_block(0), g.op("conditional_block", {}, {}, {"sub_block": Attr(pb.BLOCKS, [1, 99])}))))  # fmt: skip
add("sub-block-is-itself", Code.BLOCK_CYCLE, sub_blocks((0, 1), (1, 1)))
add("sub-block-is-its-parent", Code.BLOCK_CYCLE, sub_blocks((0, 1), (1, 2), (2, 1), parents=(0, 1)))  # fmt: skip
add("sub-block-is-block-0", Code.BLOCK_CYCLE, sub_blocks((0, 0)))
add("sub-block-is-block-0-from-below", Code.BLOCK_CYCLE, sub_blocks((0, 1), (1, 0)))
add("sub-block-owned-twice", Code.BLOCK_REFERENCE, sub_blocks((0, 1), (0, 1)))
add("sub-block-of-another-parent", Code.BLOCK_REFERENCE, sub_blocks((0, 1), (1, 2), parents=(0, 0)))  # fmt: skip
add("sub-block-unreferenced", Code.BLOCK_UNREFERENCED, sub_blocks())
add("parent-idx-cycle", Code.BLOCK_CYCLE, blocks_edit(_parent_cycle))
add("parent-idx-out-of-range", Code.BLOCK_INDEX, block_field(1, "parent_idx", 7))
add("parent-idx-negative", Code.BLOCK_INDEX, block_field(2, "parent_idx", -1))
add("parent-idx-itself", Code.BLOCK_INDEX, block_field(2, "parent_idx", 2))
add("block-0-has-a-parent", Code.BLOCK_INDEX, block_field(0, "parent_idx", 0))
add("block-idx-not-its-position", Code.BLOCK_INDEX, block_field(1, "idx", 2))
add("no-blocks", Code.BLOCK_INDEX, lambda: (pb.ProgramDesc(version=pb.Version(version=1)).SerializeToString(), None, None))  # fmt: skip
add("nesting-1100-deep", Code.PROGRAM_TOO_COMPLEX, nested(1100))
add("nesting-1000-deep-under-block-cap", Code.NESTING_TOO_DEEP, nested(1000, Policy(max_blocks=2000)))  # fmt: skip
add("nesting-9-deep", Code.NESTING_TOO_DEEP, nested(9))

# -- 7.6 denied ops with hostile attributes ------------------------------------------------------

FORBIDDEN: dict[str, dict[str, Any]] = {
    "save_combine": {"file_path": "../../etc/cron.d/x", "overwrite": True, "save_to_memory": False},
    "save": {"file_path": "/root/.ssh/authorized_keys", "overwrite": True},
    "load_combine": {"file_path": "/etc/passwd", "model_from_memory": False},
    "load": {"file_path": "/proc/self/environ"},
    "py_func": {"forward_callable_id": 0, "backward_callable_id": -1},
    "print": {"message": "x" * 10_000, "first_n": -1, "summarize": -1, "print_tensor_name": True},
    "rpc_call": {"url": "http://169.254.169.254/latest/meta-data/", "timeout": 3600},
    "c_gen_nccl_id": {"endpoint": "10.0.0.1:6170", "other_endpoints": ["10.0.0.2:6170"]},
    "gen_nccl_id": {"endpoint": "10.0.0.1:6170"},
    "c_allreduce_sum": {"ring_id": 0},
    "listen_and_serv": {"endpoint": "0.0.0.0:6174", "Fanin": 1},
    "send_v2": {"peer": 1, "ring_id": 0},
    "recv": {"epmap": ["127.0.0.1:6174"]},
    "tensorrt_engine": {"engine_serialized_data": "\x7fELF" + "A" * 64, "calibration_data": ""},
    "lite_engine": {"engine_key": "x"},
    "read_file": {"filename": "/etc/shadow"},
    "decode_jpeg": {"mode": "unchanged"},
    "create_py_reader": {},
    "run_program": {},
}


def forbidden(op_type: str, attrs: dict[str, Any], block: int = 0) -> Make:
    def edit(g: GraphBuilder) -> None:
        if block:
            control(g, 0, g.add_block(0))
        g.op(op_type, {"X": ["x"]}, {"Out": ["stolen"]}, attrs, block=block)

    return edited(edit)


for _op_type, _attrs in FORBIDDEN.items():
    add(f"forbidden-{_op_type}", Code.OP_FORBIDDEN, forbidden(_op_type, _attrs))
add("forbidden-in-sub-block", Code.OP_FORBIDDEN, forbidden("py_func", FORBIDDEN["py_func"], 1))
add("forbidden-pylayer", Code.OP_FORBIDDEN, edited(lambda g: (g.add_block(0), g.op("pylayer", {}, {}, {"blocks": Attr(pb.BLOCKS, [1])}))))  # fmt: skip

# -- 7.7 feed / fetch col abuse, too many feeds, long names --------------------------------------


def col(op_type: str, value: Any, index: int = 0) -> Make:
    return edited(lambda g: set_attr(ops_of(g, op_type)[index], "col", value))


def two_feeds(cols: tuple[int, int], same_target: bool = False) -> Make:
    def make() -> Upload:
        g = GraphBuilder()
        x = g.feed("x", FP32, [-1, 4])
        if same_target:
            g.op("feed", {"X": ["feed"]}, {"Out": [x]}, {"col": 1})
        y = x if same_target else g.feed("y", FP32, [-1, 4])
        g.node(ADD, {"X": [x], "Y": [y]}, {"Out": [V("z", [-1, 4])]})
        g.fetch("z")
        for op, value in zip(ops_of(g, "feed"), cols, strict=True):
            set_attr(op, "col", value)
        return upload(g)

    return make


def many(feeds: int, fetches: int) -> Make:
    def make() -> Upload:
        g = GraphBuilder()
        names = [g.feed(f"x{i}", FP32, [-1, 4]) for i in range(feeds)]
        g.node(ADD, {"X": [names[0]], "Y": [names[-1]]}, {"Out": [V("z", [-1, 4])]})
        for _ in range(fetches):
            g.fetch("z")
        return upload(g)

    return make


def _feed_in_sub_block(g: GraphBuilder) -> None:
    control(g, 0, g.add_block(0))
    g.op("feed", {"X": ["feed"]}, {"Out": ["x"]}, {"col": 1}, block=1)


def _second_fetch_col_0(g: GraphBuilder) -> None:
    g.fetch("xs")
    set_attr(ops_of(g, "fetch")[1], "col", 0)


add("feed-col-minus-1", Code.FEED_FETCH_INVALID, col("feed", -1))
add("feed-col-int32-max", Code.FEED_FETCH_INVALID, col("feed", INT32_MAX))
add("feed-col-long", Code.FEED_FETCH_INVALID, col("feed", Attr(pb.LONG, 0)))
add("feed-col-string", Code.FEED_FETCH_INVALID, col("feed", "0"))
add("fetch-col-minus-1", Code.FEED_FETCH_INVALID, col("fetch", -1))
add("fetch-col-int32-max", Code.FEED_FETCH_INVALID, col("fetch", INT32_MAX))
add("feed-col-duplicate", Code.FEED_FETCH_INVALID, two_feeds((0, 0)))
add("feed-col-gap", Code.FEED_FETCH_INVALID, two_feeds((0, 2)))
add("feed-same-var-twice", Code.FEED_FETCH_INVALID, two_feeds((0, 1), same_target=True))
add("fetch-col-duplicate", Code.FEED_FETCH_INVALID, edited(_second_fetch_col_0))
add("feeds-101", Code.TOO_MANY_FEEDS, many(101, 1))
add("fetches-65", Code.TOO_MANY_FEEDS, many(1, 65))
add("feed-in-sub-block", Code.FEED_FETCH_INVALID, edited(_feed_in_sub_block))
add("feed-reads-a-parameter", Code.FEED_FETCH_INVALID, op_edit(0, lambda op: op.inputs[0].arguments.__setitem__(0, "scale")))  # fmt: skip
add("feed-two-targets", Code.FEED_FETCH_INVALID, op_edit(0, lambda op: op.outputs[0].arguments.append("xs")))  # fmt: skip
add("feed-holder-twice", Code.FEED_FETCH_INVALID, edited(lambda g: g.var("feed2", None, persistable=True, vartype=VT.FEED_MINIBATCH)))  # fmt: skip
add("op-reads-feed-holder", Code.VAR_TYPE, extra_op(ADD, {"X": ["feed"], "Y": ["x"]}, {"Out": [V("z", [-1, 4])]}))  # fmt: skip
add("no-fetch", Code.NO_FETCH, edited(lambda g: g.block(0).ops.pop()))
add("name-201-chars", Code.NAME_INVALID, feeding("x" * 201, [-1, 4]))
add("name-1mb", Code.NAME_INVALID, feeding("n" * 1_000_000, [-1, 4]))
add("name-empty", Code.NAME_INVALID, feeding("", [-1, 4]))
add("name-newline", Code.NAME_INVALID, feeding("x\nERROR forged log line", [-1, 4]))
add("name-fullwidth", Code.NAME_INVALID, feeding("\uff58", [-1, 4]))
add("name-declared-twice", Code.NAME_INVALID, edited(lambda g: g.var("xs", FP32, [-1, 4])))

# -- 7.8 absurd, negative and overflowing dims; var kinds that never run -------------------------


def dims(name: str, value: Sequence[int]) -> Make:
    def edit(g: GraphBuilder) -> None:
        tensor = var_of(g, name).type.dense_tensor.tensor
        del tensor.dims[:]
        tensor.dims.extend(value)

    return edited(edit)


def var_kind(vartype: int) -> Make:
    return edited(lambda g: setattr(var_of(g, "xs").type, "type", vartype))


def tensor_field(field: str, value: int) -> Make:
    return edited(lambda g: setattr(var_of(g, "xs").type.dense_tensor.tensor, field, value))


add("dims-2-31-cubed", Code.VAR_DIMS_INVALID, dims("x", [2**31] * 3))
add("dims-int64-product-overflow", Code.VAR_DIMS_INVALID, dims("x", [INT32_MAX] * 3))
# Feeds and parameters: their dims are used. (An intermediate's stored dims are advisory.)
add("dims-minus-7", Code.VAR_DIMS_INVALID, dims("x", [-1, -7]))
add("dims-int64-min", Code.VAR_DIMS_INVALID, dims("x", [-(2**63)]))
add("dims-rank-65", Code.VAR_DIMS_INVALID, dims("y", [1] * 65))
add("dims-parameter-2-40", Code.VAR_DIMS_INVALID, dims("scale", [2**40]))
add("var-reader", Code.VAR_TYPE, var_kind(VT.READER))
add("var-selected-rows", Code.VAR_TYPE, var_kind(VT.SELECTED_ROWS))
add("var-tensor-array", Code.VAR_TYPE, var_kind(VT.DENSE_TENSOR_ARRAY))
add("var-raw", Code.VAR_TYPE, var_kind(VT.RAW))
add("var-step-scopes", Code.VAR_TYPE, var_kind(VT.STEP_SCOPES))
add("var-feed-minibatch-not-holder", Code.VAR_TYPE, edited(lambda g: g.var("f2", None, vartype=VT.FEED_MINIBATCH)))  # fmt: skip
add("var-lod-level-1", Code.VAR_TYPE, edited(lambda g: setattr(var_of(g, "xs").type.dense_tensor, "legacy_lod_level", 1)))  # fmt: skip
add("var-complex64", Code.VAR_TYPE, tensor_field("data_type", VT.COMPLEX64))
add("var-no-tensor-desc", Code.VAR_TYPE, edited(lambda g: var_of(g, "xs").type.ClearField("dense_tensor")))  # fmt: skip

# -- 7.9 / 7.10 constant materialization and expansion bombs against the budgets -----------------


def creation(op_type: str, attrs: dict[str, Any], out: Sequence[int], **inputs: list[str]) -> Make:
    def make() -> Upload:
        g = GraphBuilder()
        g.node(op_type, inputs, {"Out": [V("big", out)]}, attrs)
        g.fetch("big")
        return upload(g)

    return make


def fill_constant(shape: Sequence[int]) -> Make:
    attrs = {"dtype": int(FP32), "shape": Attr(pb.LONGS, list(shape)), "value": 0.0,
             "str_value": "0.0", "force_cpu": False, "place_type": -1}  # fmt: skip
    return creation("fill_constant", attrs, [-1] * len(shape), ShapeTensor=[], ShapeTensorList=[], ValueTensor=[])  # fmt: skip


def assign_value(shape: Sequence[int], count: int) -> Make:
    attrs = {"dtype": int(FP32), "shape": list(shape), "values": Attr(pb.SCALARS, [1.0] * count)}
    return creation("assign_value", attrs, [-1] * len(shape))


def expand(op_type: str, attrs: dict[str, Any], rank: int, **inputs: list[str]) -> Make:
    """feed v[1, 6] -> op_type -> fetch."""

    def make() -> Upload:
        g = GraphBuilder()
        g.feed("v", FP32, [1, 6])
        g.node(op_type, {"X": ["v"], **inputs}, {"Out": [V("big", [-1] * rank)]}, attrs)
        g.fetch("big")
        return upload(g)

    return make


def concat_chain(links: int, policy: Policy | None = None) -> Make:
    """h = concat(h, h) `links` times: 2**links times the [-1, 4] input."""

    def make() -> Upload:
        g = GraphBuilder()
        h = g.feed("x", FP32, [-1, 4])
        for i in range(links):
            g.node("concat", {"X": [h, h], "AxisTensor": []}, {"Out": [V(f"cat{i}", [-1, -1])]}, {"axis": 1})  # fmt: skip
            h = f"cat{i}"
        g.fetch(h)
        return upload(g, policy)

    return make


def tile_chain(x_dims: Sequence[int], repeat_times: list[int], links: int) -> Make:
    """tile `links` times; on an empty input the byte cap never fires, only the dim cap."""

    def make() -> Upload:
        g = GraphBuilder()
        h = g.feed("x", FP32, x_dims)
        inputs = {"RepeatTimes": [], "repeat_times_tensor": []}
        for i in range(links):
            out = V(f"tile{i}", [-1] * len(x_dims))
            g.node("tile", {"X": [h], **inputs}, {"Out": [out]}, {"repeat_times": repeat_times})
            h = out.name
        g.fetch(h)
        return upload(g)

    return make


UNCAPPED_TENSORS = Policy(max_tensor_bytes=2**62, max_dim=2**62)
UNCAPPED = Policy(max_tensor_bytes=2**62, max_dim=2**62, max_activation_bytes_per_sample=2**62)
add("fill-constant-1e9-squared", Code.TENSOR_TOO_LARGE, fill_constant([10**9, 10**9]))
add("fill-constant-2-62-squared", Code.TENSOR_TOO_LARGE, fill_constant([2**62, 2**62]))
add("assign-value-len-mismatch", Code.ATTR_VALUE, assign_value([2, 3], 5))
add("assign-value-1e9-squared", Code.ATTR_VALUE, assign_value([10**9, 10**9], 1))
add("expand-v2-huge", Code.TENSOR_TOO_LARGE, expand("expand_v2", {"shape": [10**6, 10**6, 6]}, 3, Shape=[], expand_shapes_tensor=[]))  # fmt: skip
add("tile-huge", Code.TENSOR_TOO_LARGE, expand("tile", {"repeat_times": [10**5, 10**5]}, 2, RepeatTimes=[], repeat_times_tensor=[]))  # fmt: skip
add("concat-chain-40", Code.TENSOR_TOO_LARGE, concat_chain(40))
add("tile-chain-on-empty-tensor", Code.TENSOR_TOO_LARGE, tile_chain([0, 1], [1, INT32_MAX], 500))
add(
    "tile-chain-on-empty-at-max-batch",
    Code.TENSOR_TOO_LARGE,
    tile_chain([-1, 0], [INT32_MAX, 1], 3),
)
add("concat-chain-40-cumulative", Code.ACTIVATIONS_TOO_LARGE, concat_chain(40, UNCAPPED_TENSORS))
add("concat-chain-40-flops", Code.FLOPS_TOO_LARGE, concat_chain(40, UNCAPPED))
add("feed-100k-squared", Code.TENSOR_TOO_LARGE, feeding("x", [100_000, 100_000]))
add("tensor-over-cap-at-max-batch", Code.TENSOR_TOO_LARGE, feeding("x", [-1, 1024, 1024], Policy(max_tensor_bytes=2**26)))  # fmt: skip
add("activations-over-cap", Code.ACTIVATIONS_TOO_LARGE, with_policy(Policy(max_activation_bytes_per_sample=16)))  # fmt: skip
add("flops-over-cap", Code.FLOPS_TOO_LARGE, with_policy(Policy(max_flops_per_sample=2)))
add("too-many-ops", Code.TOO_MANY_OPS, with_policy(Policy(max_ops=3)))
add("too-many-vars", Code.PROGRAM_TOO_COMPLEX, with_policy(Policy(max_vars=3)))
add("too-many-attrs", Code.PROGRAM_TOO_COMPLEX, with_policy(Policy(max_attrs_per_op=0)))
add("attr-list-too-long", Code.PROGRAM_TOO_COMPLEX, edited(lambda g: set_attr(g.block(0).ops[1], "axis", list(range(100))), Policy(max_attr_items=64)))  # fmt: skip

# -- 7.11 zero-size dims where ops divide --------------------------------------------------------

REDUCE = {"keep_dim": False, "reduce_all": False, "in_dtype": -1, "out_dtype": -1}
ARG_MAX = {"dtype": 3, "flatten": False, "keepdims": False}
TOP_K = {"k": 1, "axis": 1, "largest": True, "sorted": True}
TOP_K_OUT = {"Out": [V("out", [-1, 1])], "Indices": [V("idx", [-1, 1], INT64)]}
GLOBAL_AVG = {**POOL2D_ATTRS, "pooling_type": "avg", "global_pooling": True}
add("reduce-mean-over-0", Code.EMPTY_DIM, one_op("reduce_mean", [-1, 0], {**REDUCE, "dim": [1]}))
add("reduce-mean-all-of-0", Code.EMPTY_DIM, one_op("reduce_mean", [0, 3], {**REDUCE, "dim": [0, 1], "reduce_all": True}, ()))  # fmt: skip
add("arg-max-numel-0", Code.EMPTY_DIM, one_op("arg_max", [-1, 0], {**ARG_MAX, "axis": Attr(pb.LONG, 1)}, out_dtype=INT64))  # fmt: skip
add("top-k-on-dim-0", Code.EMPTY_DIM, one_op("top_k_v2", [-1, 0], TOP_K, inputs={"K": []}, outputs=TOP_K_OUT))  # fmt: skip
add("global-pool-over-0x0", Code.EMPTY_DIM, one_op("pool2d", [-1, 4, 0, 0], GLOBAL_AVG, [-1, 4, 1, 1]))  # fmt: skip

# -- 7.12 axis and rank abuse ---------------------------------------------------------------------


def axis_of_add(axis: Any) -> Make:
    return op_edit(2, lambda op: set_attr(op, "axis", axis))


@row("matmul-0-d-input", Code.AXIS_INVALID)
def _matmul_0d() -> Upload:
    g = GraphBuilder()
    x = g.feed("x", FP32, [])
    w = g.param("w", weights(4, 3))
    g.node("matmul_v2", {"X": [x], "Y": [w]}, {"Out": [V("out", [3])]}, {"trans_x": False, "trans_y": False})  # fmt: skip
    g.fetch("out")
    return upload(g)


add("elementwise-axis-out-of-range", Code.AXIS_INVALID, axis_of_add(2))
add("elementwise-axis-2-31", Code.AXIS_INVALID, axis_of_add(Attr(pb.LONG, 2**31)))
add("elementwise-axis-minus-2-31", Code.AXIS_INVALID, axis_of_add(-(2**31)))
add("elementwise-axis-from-var", Code.ATTR_TYPE, op_edit(2, lambda op: op.attrs.add(name="axis", type=pb.VAR, var_name="x")))  # fmt: skip
add("softmax-axis-equals-rank", Code.AXIS_INVALID, one_op("softmax", [-1, 4], {"axis": 2}))
add("softmax-axis-2-31", Code.AXIS_INVALID, one_op("softmax", [-1, 4], {"axis": Attr(pb.LONG, 2**31)}))  # fmt: skip
add("softmax-axis-minus-2-31", Code.AXIS_INVALID, one_op("softmax", [-1, 4], {"axis": -(2**31)}))
add("concat-axis-equals-rank", Code.AXIS_INVALID, one_op("concat", [-1, 4], {"axis": 2}, inputs={"AxisTensor": []}))  # fmt: skip
add("reduce-dim-2-31", Code.AXIS_INVALID, one_op("reduce_mean", [-1, 4], {**REDUCE, "dim": [2**31]}))  # fmt: skip
add("arg-max-axis-minus-2-31", Code.AXIS_INVALID, one_op("arg_max", [-1, 4], {**ARG_MAX, "axis": Attr(pb.LONG, -(2**31))}, out_dtype=INT64))  # fmt: skip
add("pool2d-0-d-input", Code.AXIS_INVALID, one_op("pool2d", [], POOL2D_ATTRS, []))


def from_feed(op_type: str, slot: str, attrs: dict[str, Any], outputs: dict[str, list[V]]) -> Make:
    """x[-1, 10] through op_type, with `slot` (an axis or k tensor) fed by the caller."""

    def make() -> Upload:
        g = GraphBuilder()
        x = g.feed("x", FP32, [-1, 10])
        g.feed("t", DType.INT32, [1])
        inputs = {"X": [x, x] if op_type == "concat" else [x], slot: ["t"]}
        g.node(op_type, inputs, outputs, attrs)
        g.fetch(next(iter(outputs.values()))[0].name)
        return upload(g)

    return make


# threats.md 7.12: an axis or k computed from a feed is known only at run time; rejected.
add("concat-axis-from-a-feed", Code.ATTR_VALUE, from_feed("concat", "AxisTensor", {"axis": 0}, {"Out": [V("o", [-1, -1])]}))  # fmt: skip
add("top-k-from-a-feed", Code.ATTR_VALUE, from_feed("top_k_v2", "K", {**TOP_K, "k": 1}, {"Out": [V("o", [-1, -1])], "Indices": [V("i", [-1, -1], INT64)]}))  # fmt: skip


@row("pool2d-global-adaptive-max-of-unknown-size", Code.LOWERING_UNSUPPORTED)
def _global_adaptive_max_of_unknown_size() -> Upload:
    """Paddle's max kernel pools windows of the input's size: ONNX needs it when building."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [1, 2, -1, -1])
    attrs = {**POOL2D_ATTRS, "global_pooling": True, "adaptive": True}
    g.node("pool2d", {"X": [x]}, {"Out": [V("o", [1, 2, -1, -1])]}, attrs)
    g.fetch("o")
    return upload(g)


# -- 7.13 .pdiparams attacks ----------------------------------------------------------------------
# affine's file holds bias then scale (sorted names), each 20 header bytes + a 4-byte TensorDesc +
# 16 bytes of data.
TENSOR = 40
BIAS = (FP32, np.zeros(4, np.float32))
SCALE = (FP32, np.ones(4, np.float32))


def params(edit: Callable[[bytes], bytes], policy: Policy | None = None) -> Make:
    def make() -> Upload:
        program, raw, _ = valid()
        assert raw is not None
        return program, edit(raw), policy

    return make


def patch(offset: int, fmt: str, value: int) -> Make:
    packed = struct.pack(fmt, value)
    return params(lambda raw: raw[:offset] + packed + raw[offset + len(packed) :])


def tensors(*items: tuple[DType, np.ndarray]) -> Make:
    return lambda: (valid()[0], write_params(items), None)


def first_tensor(desc: bytes | pb.VarType.TensorDesc, data: bytes = b"", **header: int) -> Make:
    """A file whose first tensor has this (possibly hostile) TensorDesc and header fields."""
    raw = desc if isinstance(desc, bytes) else desc.SerializeToString()
    fields = {"version": 0, "lod": 0, "tensor_version": 0, "desc_len": len(raw), **header}
    head = struct.pack("<IQIi", *fields.values())
    return lambda: (valid()[0], head + raw + data + write_params([SCALE]), None)


def desc(data_type: int, dims: Sequence[int]) -> pb.VarType.TensorDesc:
    return pb.VarType.TensorDesc(data_type=data_type, dims=list(dims))  # type: ignore[arg-type]


FP32_4 = desc(VT.FP32, [4])
add("params-truncated", Code.PARAMS_TRUNCATED, params(lambda r: r[:50]))
add("params-truncated-in-data", Code.PARAMS_TRUNCATED, params(lambda r: r[:-4]))
add("params-empty", Code.PARAMS_COUNT, params(lambda r: b""))
add("params-desc-len-negative", Code.PARAMS_HEADER, patch(16, "<i", -1))
add("params-desc-len-huge", Code.PARAMS_HEADER, patch(16, "<i", INT32_MAX))
add("params-desc-len-zero", Code.PARAMS_HEADER, patch(16, "<i", 0))
add("params-desc-len-past-eof", Code.PARAMS_TRUNCATED, lambda: (valid()[0], struct.pack("<IQIi", 0, 0, 0, 4000), None))  # fmt: skip
add("params-desc-garbage", Code.PARAMS_HEADER, first_tensor(b"\xff" * 8))
add("params-desc-no-data-type", Code.PARAMS_HEADER, first_tensor(b"\x10\x04"))
add("params-desc-unknown-field", Code.PARAMS_HEADER, first_tensor(FP32_4.SerializeToString() + b"\x18\x01"))  # fmt: skip
add("params-desc-unknown-dtype", Code.PARAMS_HEADER, first_tensor(b"\x08\x63\x10\x04"))
add("params-desc-negative-dim", Code.PARAMS_DIMS, first_tensor(desc(VT.FP32, [-4])))
add("params-desc-overflowing-dims", Code.PARAMS_DIMS, first_tensor(desc(VT.FP32, [2**40, 2**40])))
add("params-desc-rank-65", Code.PARAMS_DIMS, first_tensor(desc(VT.FP32, [1] * 65)))
add("params-desc-2-60-elements", Code.PARAMS_TRUNCATED, first_tensor(desc(VT.FP32, [2**30, 2**30])))  # fmt: skip
add("params-dims-differ", Code.PARAMS_DIMS, tensors((FP32, np.zeros((2, 2), np.float32)), SCALE))
add("params-dims-0-d", Code.PARAMS_DIMS, tensors((FP32, np.zeros((), np.float32)), SCALE))
add("params-data-short", Code.PARAMS_HEADER, params(lambda r: r[: TENSOR - 4] + r[TENSOR:]))
add("params-data-long", Code.PARAMS_HEADER, params(lambda r: r[:TENSOR] + bytes(4) + r[TENSOR:]))
add("params-trailing-byte", Code.PARAMS_TRAILING, params(lambda r: r + b"\0"))
add("params-one-tensor-too-few", Code.PARAMS_COUNT, tensors(BIAS))
add("params-one-tensor-too-many", Code.PARAMS_TRAILING, tensors(BIAS, SCALE, SCALE))
add("params-lod-level-1", Code.PARAMS_HEADER, patch(4, "<Q", 1))
add("params-lod-level-2-63", Code.PARAMS_HEADER, patch(4, "<Q", 2**63))
add("params-version-1", Code.PARAMS_HEADER, patch(0, "<I", 1))
add("params-tensor-version-1", Code.PARAMS_HEADER, patch(12, "<I", 1))
add("params-dtype-differs", Code.PARAMS_DTYPE, tensors((INT64, np.zeros(4, np.int64)), SCALE))
add("params-dtype-complex64", Code.PARAMS_DTYPE, first_tensor(desc(VT.COMPLEX64, [4]), bytes(32)))
add("params-dtype-not-elements", Code.PARAMS_DTYPE, first_tensor(desc(VT.FEED_MINIBATCH, [4])))
add("params-missing", Code.PARAMS_MISSING, lambda: (valid()[0], None, None))
add("params-unexpected", Code.PARAMS_UNEXPECTED, lambda: (feeding("x", [-1, 4])()[0], valid()[1], None))  # fmt: skip
add("params-over-cap", Code.PARAMS_TOO_LARGE, params(lambda r: r, Policy(max_params_bytes=32)))

# -- 7.14 graph wiring faults and training programs; slots and attrs ----------------------------


def _reshape_then_read_xshape(g: GraphBuilder) -> None:
    outputs = {"Out": [V("r", [-1, 2, 2])], "XShape": [V("r.xshape", [0, -1, 4])]}
    g.node("reshape2", {"X": ["x"], "Shape": [], "ShapeTensor": []}, outputs, {"shape": [-1, 2, 2]})
    g.node(ADD, {"X": ["r.xshape"], "Y": ["r.xshape"]}, {"Out": [V("z", [0, -1, 4])]})


def _grad_op_in_sub_block(g: GraphBuilder) -> None:
    control(g, 0, g.add_block(0))
    g.op("elementwise_add_grad", {}, {}, block=1)


def _int64_param(g: GraphBuilder) -> None:
    g.param("k", weights(4, dtype=INT64))
    g.node(ADD, {"X": ["x"], "Y": ["k"]}, Z)


def _short_param(g: GraphBuilder) -> None:
    g.param("short", weights(3))
    g.node(ADD, {"X": ["x"], "Y": ["short"]}, Z)


COMPLEX = pb.Scalar(type=pb.Scalar.COMPLEX128, c=pb.Complex(r=1, i=1))
SPLIT_ATTRS = {"axis": 1, "num": 2, "sections": Attr(pb.INTS, [])}
add("reads-undefined-var", Code.VAR_UNDEFINED, extra_op(ADD, {"X": ["ghost"], "Y": ["x"]}, Z))
add("reads-a-later-var", Code.VAR_UNDEFINED, op_edit(1, lambda op: op.inputs[0].arguments.__setitem__(0, "y")))  # fmt: skip
add("writes-twice", Code.VAR_REDEFINED, extra_op(ADD, {"X": ["x"], "Y": ["x"]}, {"Out": ["xs"]}))
add("writes-in-place", Code.VAR_REDEFINED, extra_op(ADD, {"X": ["x"], "Y": ["scale"]}, {"Out": ["x"]}))  # fmt: skip
add("writes-parameter", Code.VAR_WRITES_PARAM, extra_op(ADD, {"X": ["x"], "Y": ["x"]}, {"Out": ["scale"]}))  # fmt: skip
add("feed-writes-parameter", Code.VAR_WRITES_PARAM, edited(lambda g: g.op("feed", {"X": ["feed"]}, {"Out": ["scale"]}, {"col": 1})))  # fmt: skip
add("writes-undeclared-var", Code.VAR_UNDECLARED, extra_op(ADD, {"X": ["x"], "Y": ["x"]}, {"Out": ["nowhere"]}))  # fmt: skip
add("reads-xshape", Code.VAR_READS_UNUSED, edited(_reshape_then_read_xshape))
add("grad-op", Code.TRAINING_PROGRAM, extra_op("relu_grad", {"Out": ["y"], "Out@GRAD": ["y"]}, {"X@GRAD": ["g"]}))  # fmt: skip
add("grad-op-in-sub-block", Code.TRAINING_PROGRAM, edited(_grad_op_in_sub_block))
add("optimizer-op", Code.TRAINING_PROGRAM, extra_op("sgd", {"Param": ["scale"], "Grad": ["y"], "LearningRate": ["x"]}, {"ParamOut": ["scale"]}))  # fmt: skip
add("grad-var", Code.TRAINING_PROGRAM, edited(lambda g: g.var("y@GRAD", FP32, [-1, 4])))
add("forward-block-idx", Code.TRAINING_PROGRAM, edited(lambda g: setattr(g.block(0), "forward_block_idx", 0)))  # fmt: skip
add("op-unknown", Code.OP_UNKNOWN, extra_op("my_custom_op", {"X": ["x"]}, Z))
add("op-not-allowed", Code.OP_NOT_ALLOWED, with_policy(Policy(allowed_ops=frozenset({"feed", "fetch", "elementwise_mul"}))))  # fmt: skip
add("slot-unknown", Code.SLOT_UNKNOWN, op_edit(2, lambda op: op.inputs.add(parameter="Z", arguments=["x"])))  # fmt: skip
add("slot-missing", Code.SLOT_MISSING, op_edit(2, lambda op: op.inputs.pop()))
add("slot-empty", Code.SLOT_MISSING, op_edit(2, lambda op: op.inputs[1].ClearField("arguments")))
add("slot-two-vars", Code.SLOT_ARITY, op_edit(2, lambda op: op.inputs[0].arguments.append("x")))
add("slot-twice", Code.SLOT_ARITY, op_edit(2, lambda op: op.inputs.add(parameter="X", arguments=["x"])))  # fmt: skip
add("output-repeats-var", Code.SLOT_ARITY, extra_op("split", {"X": ["x"], "AxisTensor": [], "SectionsTensorList": []}, {"Out": ["s", "s"]}, **SPLIT_ATTRS))  # fmt: skip
add("attr-unknown", Code.ATTR_UNKNOWN, op_edit(2, lambda op: set_attr(op, "evil", "rm -rf /")))
add("attr-wrong-type", Code.ATTR_TYPE, op_edit(2, lambda op: set_attr(op, "axis", "-1")))
add("attr-given-twice", Code.ATTR_VALUE, op_edit(2, lambda op: op.attrs.extend([pb.OpDesc.Attr(name="axis", type=pb.INT, i=-1)] * 2)))  # fmt: skip
add("attr-complex-scalar", Code.ATTR_TYPE, op_edit(2, lambda op: op.attrs.add(name="axis", type=pb.SCALAR, scalar=COMPLEX)))  # fmt: skip
add("attr-missing", Code.ATTR_MISSING, edited(lambda g: ops_of(g, "fetch")[0].ClearField("attrs")))  # fmt: skip
add("dtype-mismatch", Code.DTYPE_MISMATCH, edited(_int64_param))
add("shape-mismatch", Code.SHAPE_MISMATCH, edited(_short_param))
add("stored-dtype-contradicts", Code.VAR_DTYPE_MISMATCH, edited(lambda g: setattr(var_of(g, "y").type.dense_tensor.tensor, "data_type", VT.INT64)))  # fmt: skip

# Control flow: the programs and their full messages are in tests/support/control_flow.py.
for _id, _bad in control_flow.BAD.items():
    add(f"control-{_id}", _bad.code, lambda bad=_bad: control_flow.as_upload(bad))


@row("rnn-training-dropout", Code.RNN_UNSUPPORTED)
def _rnn_training_dropout() -> Upload:
    """A two-layer GRU (input 4, hidden 3) in training mode with dropout between the layers."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [5, -1, 4])
    h0 = g.feed("h0", FP32, [2, -1, 3])
    shapes = [(9, 4), (9, 3), (9, 3), (9, 3), (9,), (9,), (9,), (9,)]
    weight_list = [g.param(f"w{i}", weights(*shape)) for i, shape in enumerate(shapes)]
    attrs = {"mode": "GRU", "hidden_size": 3, "input_size": 4, "num_layers": 2}
    g.node(
        "rnn",
        {"Input": [x], "PreState": [h0], "WeightList": weight_list},
        {"Out": [V("out", [5, -1, 3])], "State": [V("h", [2, -1, 3])]},
        {**attrs, "is_test": False, "dropout_prob": 0.5},
    )
    g.fetch("out")
    return upload(g)
