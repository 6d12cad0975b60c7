"""Reads Paddle 3's PIR program (`model.json`) into the same ProgramDesc the legacy path parses.

The JSON layout (Paddle 3.3.1, serialization version 4): `program.regions[0].blocks[0].ops`, each
op `{"#": name, "A": attrs, "I": [{"%": id}], "O": [{"%": id, "TT": type}], "regions": [...]}`;
names are `<dialect>.<op>` with dialects numbered (0 builtin, 1 pd_op, 2 cf) and `"p"` for
`builtin.parameter`; attributes `{"N": name, "AT": {"#": kind, "D": value}}`; value ids are SSA
(positive for op results, negative for block arguments, 0 for an absent optional operand).

Every op is converted through the one table in `pir_ops`; where each legacy op came from is kept
(`origins`), so that diagnostics point at the PIR op. Problems the reader itself finds are
collected as FormatErrors with a position; structural damage stops the conversion at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr, set_attr
from graph_proto.errors import FormatError
from graph_proto.pir_json import load_json, looks_like_pir
from graph_proto.pir_ops import DIALECTS, DROPPED_ATTRS, OPS, STRUCTURAL, OpMap

__all__ = ["PirOrigin", "PirProgram", "looks_like_pir", "parse_pir"]

MAX_OPS: Final = 100_000
MAX_BLOCKS: Final = 1024  # the default policy's max_blocks (validator/policy.py says why)
MAX_RANK: Final = 64
MAX_OPERANDS: Final = 4096
MAX_VALUE_ID: Final = 2**31 - 1
# Elements a `pd_op.full` may expand to where it folds into a list attribute: the policy's
# max_attr_items by default, checked on the declared dims before any list is built.
MAX_FOLDED_ELEMENTS: Final = 1 << 20
_MAGIC: Final = "pir"

_DTYPES: Final = {
    "t_bool": pb.VarType.BOOL,
    "t_i8": pb.VarType.INT8,
    "t_ui8": pb.VarType.UINT8,
    "t_i16": pb.VarType.INT16,
    "t_i32": pb.VarType.INT32,
    "t_i64": pb.VarType.INT64,
    "t_f16": pb.VarType.FP16,
    "t_bf16": pb.VarType.BF16,
    "t_f32": pb.VarType.FP32,
    "t_f64": pb.VarType.FP64,
}
# pd_op's `a_dtype` attribute values (phi::DataType names) -> VarType numbers.
_DTYPE_NAMES: Final = {
    "bool": pb.VarType.BOOL,
    "int8": pb.VarType.INT8,
    "uint8": pb.VarType.UINT8,
    "int16": pb.VarType.INT16,
    "int32": pb.VarType.INT32,
    "int64": pb.VarType.INT64,
    "float16": pb.VarType.FP16,
    "bfloat16": pb.VarType.BF16,
    "float32": pb.VarType.FP32,
    "float64": pb.VarType.FP64,
}
# Float attributes JSON cannot hold: Paddle writes {"VD": "INF"} in place of {"D": inf}.
_SPECIAL_FLOATS: Final = {"INF": float("inf"), "-INF": float("-inf"), "NaN": float("nan")}
_UNDEFINED_DTYPE: Final = "Undefined(ALL_DTYPE)"
_REDUCE_OPS: Final = frozenset(
    {"reduce_mean", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod"}
)
_FLOAT32_MAX: Final = 3.4028234663852886e38
_INTEGER_DTYPES: Final = frozenset(
    {pb.VarType.INT8, pb.VarType.UINT8, pb.VarType.INT16, pb.VarType.INT32, pb.VarType.INT64}
)
_NAME: Final = re.compile(r"[A-Za-z0-9_.@/:\-]{1,200}")


@dataclass(frozen=True, slots=True)
class PirOrigin:
    """Where a legacy op came from: PIR block (numbered depth-first), op position, op name."""

    block: int
    index: int
    name: str


@dataclass(slots=True)
class PirProgram:
    program: pb.ProgramDesc
    origins: dict[tuple[int, int], PirOrigin] = field(default_factory=dict)
    problems: list[tuple[FormatError, PirOrigin | None]] = field(default_factory=list)


@dataclass(slots=True)
class _Value:
    """One SSA value: its legacy var name(s), dtype and dims; `const` for folded constants."""

    names: tuple[str, ...]
    dtype: int | None
    dims: tuple[int, ...]
    const: tuple[int | float | bool, ...] | None = None
    const_op: Mapping[str, Any] | None = None  # the full/full_int_array op, emitted on demand
    scalar: bool = False  # a pd_op.full: folds as one number, not a list
    vector: bool = False


class _Broken(Exception):
    """Raised inside the converter; carries the FormatError that stops it."""

    def __init__(self, error: FormatError) -> None:
        self.error = error


def parse_pir(data: bytes, *, max_bytes: int, max_folded: int = MAX_FOLDED_ELEMENTS) -> PirProgram:
    """The PIR program in `data` as a ProgramDesc plus the PIR position of each op;
    `max_folded`: the most elements a constant folded into a list attribute may have."""
    doc = load_json(data, max_bytes=max_bytes)
    converter = _Converter(max_folded)
    try:
        converter.run(doc)
    except _Broken as broken:
        raise broken.error from None
    return converter.result


def _persistable(op: Mapping[str, Any], name: str) -> bool:
    """Whether Paddle saved a builtin.parameter's tensor in .pdiparams: its result attributes
    `"OA"` are [persistable, stop_gradient, trainable] as 0/1. nn.LSTM's dropout state
    (`lstm_0.dropout_state__non_persistable`) is a parameter op with persistable 0, which
    Paddle leaves out of .pdiparams (a persistable var here would count one tensor too many)."""
    flags = op.get("OA", [1])
    if not isinstance(flags, list) or not flags or flags[0] not in (0, 1):
        raise _fail(
            f"builtin.parameter {name!r}: expected [persistable, stop_gradient, trainable] "
            f"flags (0 or 1) as result attributes, got {_kind(flags)}"
        )
    return bool(flags[0])


def _folded(value: _Value, limit: int) -> Any:
    """A constant as a legacy attribute: full_int_array's list; full's number, or a list of
    copies where the full fills more than one element (paddle.full([6], 1) as paddings).
    None where the full's declared dims hold more than `limit` elements (nothing is built)."""
    const = list(value.const or ())
    if not value.scalar:
        return const
    count = _element_count(value.dims, limit)
    if count is None:
        return None
    return const[0] if count == 1 or not value.dims else const * count


def _element_count(dims: Sequence[int], limit: int) -> int | None:
    """The product of `dims` (negative ones count 0), or None as soon as it passes `limit`."""
    count = 1
    for dim in dims:
        count *= max(dim, 0)
        if count > limit:
            return None
    return count


def _fail(message: str, code: str = "PROGRAM_MALFORMED") -> _Broken:
    return _Broken(FormatError(code, message))


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(f"{what}: expected a JSON object, got {_kind(value)}")
    return value


def _list(value: Any, what: str, limit: int = MAX_OPERANDS) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(f"{what}: expected a JSON array, got {_kind(value)}")
    if len(value) > limit:
        raise _fail(
            f"{what}: expected at most {limit} items, got {len(value)}", "PROGRAM_TOO_COMPLEX"
        )
    return value


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(f"{what}: expected an integer, got {_kind(value)}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _fail(f"{what}: expected a string, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return names.get(type(value), type(value).__name__)


class _Converter:
    def __init__(self, max_folded: int = MAX_FOLDED_ELEMENTS) -> None:
        self.max_folded = max_folded
        self.result = PirProgram(pb.ProgramDesc())
        self.program = self.result.program
        self.program.version.version = 3003001
        self.scopes: list[dict[int, _Value]] = []
        self.declared: set[str] = set()
        self.parameters: dict[str, tuple[int | None, tuple[int, ...], bool]] = {}
        self.op_count = 0
        self.fetch_names: dict[int, str] = {}
        self.feeds = 0
        self.fetches = 0
        self.origin: PirOrigin | None = None
        # (scope depth of a sub-block, names it reads from enclosing blocks): its owner's Input.
        self.frames: list[tuple[int, set[str]]] = []
        # Vars in-place PIR ops (increment_, ...) wrote, in order: a loop body that writes a var
        # of an enclosing block carries it (PIR mutates the value; legacy lists it in Out).
        self.written_in_place: list[str] = []

    # Document and blocks.

    def run(self, doc: Any) -> None:
        doc = _obj(doc, "document")
        base = _obj(doc.get("base_code"), "base_code")
        if base.get("magic") != _MAGIC:
            raise _fail(f"base_code.magic: expected {_MAGIC!r}, got {base.get('magic')!r}")
        _int(base.get("version"), "base_code.version")
        program = _obj(doc.get("program"), "program")
        regions = _list(program.get("regions"), "program.regions")
        if len(regions) != 1:
            raise _fail(f"program.regions: expected 1 region, got {len(regions)}")
        blocks = _list(_obj(regions[0], "region 0").get("blocks"), "region 0 blocks")
        if len(blocks) != 1:
            raise _fail(f"program region: expected 1 block, got {len(blocks)}")
        top = self.program.blocks.add()
        top.idx, top.parent_idx = 0, -1
        ops = _list(_obj(blocks[0], "block 0").get("ops"), "block 0 ops", MAX_OPS)
        self._collect_fetch_names(ops)
        self.scopes.append({})
        self._block(ops, 0, 0)

    def _collect_fetch_names(self, ops: list[Any]) -> None:
        """Fetched values produced by ordinary ops take the fetch's name (Paddle's output name)."""
        for op in ops:
            if isinstance(op, dict) and op.get("#") == "1.fetch":
                inputs = op.get("I")
                name = self._plain_attrs(op).get("name") if isinstance(op.get("A"), list) else None
                if isinstance(inputs, list) and len(inputs) == 1 and isinstance(name, str):
                    value = inputs[0].get("%") if isinstance(inputs[0], dict) else None
                    if isinstance(value, int) and value not in self.fetch_names:
                        self.fetch_names[value] = name

    def _block(self, ops: list[Any], pir_block: int, legacy_block: int) -> None:
        for index, op in enumerate(ops):
            self.op_count += 1
            if self.op_count > MAX_OPS:
                raise _fail(f"expected at most {MAX_OPS} ops, got more", "PROGRAM_TOO_COMPLEX")
            op = _obj(op, f"block {pir_block}, op {index}")
            name = self._op_name(op, pir_block, index)
            self.origin = PirOrigin(pir_block, index, name)
            self._op(op, name, legacy_block)

    def _op_name(self, op: dict[str, Any], block: int, index: int) -> str:
        raw = _str(op.get("#"), f"block {block}, op {index} name")
        if raw == "p":
            return "builtin.parameter"
        dialect, _, short = raw.partition(".")
        full = DIALECTS.get(dialect)
        if full is None or not short:
            raise _fail(
                f"block {block}, op {index}: expected a dialect from {sorted(DIALECTS.values())}, "
                f"got {raw!r}",
                "PIR_DIALECT_UNKNOWN",
            )
        return f"{full}.{short}"

    # Values.

    def _lookup(self, ref: Any, what: str) -> _Value | None:
        vid = _int(_obj(ref, what).get("%"), f"{what} id")
        if vid == 0:
            return None
        for depth in range(len(self.scopes) - 1, -1, -1):
            value = self.scopes[depth].get(vid)
            if value is not None:
                for frame_depth, reads in self.frames:
                    if depth < frame_depth:
                        reads.update(value.names)
                return value
        raise self._value_error(f"{what}: expected a value defined earlier, got %{vid}")

    def _value_error(self, message: str) -> _Broken:
        return self._fail_here(message, "PIR_VALUE_UNDEFINED")

    def _fail_here(self, message: str, code: str) -> _Broken:
        """A failure that names the PIR op being converted."""
        where = self.origin
        prefix = f"block {where.block}, op {where.index} ({where.name}): " if where else ""
        return _fail(prefix + message, code)

    def _define(self, vid: int, value: _Value) -> None:
        if not 0 < abs(vid) <= MAX_VALUE_ID:
            raise _fail(f"value id: expected 1..{MAX_VALUE_ID} in magnitude, got {vid}")
        if any(vid in scope for scope in self.scopes):
            raise self._redefined(vid)
        self.scopes[-1][vid] = value

    def _redefined(self, vid: int) -> _Broken:
        where = self.origin
        prefix = f"block {where.block}, op {where.index} ({where.name}): " if where else ""
        return _fail(
            prefix + f"expected each value defined once, got %{vid} twice", "VAR_REDEFINED"
        )

    def _results(self, op: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        out = op.get("O")
        items = [out] if isinstance(out, dict) else _list(out, "op results")
        results = []
        for i, item in enumerate(items):
            item = _obj(item, f"result {i}")
            results.append(
                (_int(item.get("%"), f"result {i} id"), _obj(item.get("TT"), f"result {i} type"))
            )
        return results

    def _tensor_type(self, tt: Mapping[str, Any], what: str) -> tuple[int | None, tuple[int, ...]]:
        kind = _str(tt.get("#"), f"{what} type")
        if kind == "0.t_null":
            return None, ()
        if kind != "0.t_dtensor":
            raise _fail(
                f"{what}: expected a dense tensor type (0.t_dtensor), got {kind!r}", "VAR_TYPE"
            )
        desc = _list(tt.get("D"), f"{what} type")
        if len(desc) < 2:
            raise _fail(f"{what}: expected [dtype, dims, ...], got {len(desc)} items")
        dtype_name = _str(_obj(desc[0], f"{what} dtype").get("#"), f"{what} dtype")
        dtype = _DTYPES.get(dtype_name.partition(".")[2]) if dtype_name.startswith("0.") else None
        if dtype is None:
            raise _fail(
                f"{what}: expected a dtype from {sorted(_DTYPES)}, got {dtype_name!r}", "VAR_TYPE"
            )
        dims = _list(desc[1], f"{what} dims", MAX_RANK)
        return dtype, tuple(_int(d, f"{what} dim") for d in dims)

    def _var_name(self, vid: int, op_name: str) -> str:
        fetched = self.fetch_names.get(vid)
        if fetched is not None and fetched not in self.declared:
            return fetched
        short = op_name.rpartition(".")[2].rstrip("_") or "value"
        return f"{short}_{vid}.tmp" if vid > 0 else f"arg_{-vid}.tmp"

    def _declare(
        self,
        block: int,
        name: str,
        dtype: int | None,
        dims: Sequence[int],
        *,
        persistable: bool = False,
    ) -> None:
        if name in self.declared:
            raise _fail(f"expected each variable name once, got {name!r} twice", "VAR_REDEFINED")
        self.declared.add(name)
        var = self.program.blocks[block].vars.add()
        var.name = name
        var.type.type = pb.VarType.DENSE_TENSOR
        if persistable:
            var.persistable = True
        if dtype is not None:
            var.type.dense_tensor.tensor.data_type = dtype  # type: ignore[assignment]
            var.type.dense_tensor.tensor.dims.extend(dims)

    def _holder(self, name: str, vartype: int) -> None:
        if name not in self.declared:
            self.declared.add(name)
            var = self.program.blocks[0].vars.add()
            var.name, var.persistable = name, True
            var.type.type = vartype  # type: ignore[assignment]

    # Attributes.

    def _plain_attrs(self, op: dict[str, Any]) -> dict[str, Any]:
        return {k: _plain(v) for k, v in self._attrs(op).items()}

    def _attrs(self, op: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, item in enumerate(_list(op.get("A"), "op attributes")):
            item = _obj(item, f"attribute {i}")
            name = _str(item.get("N"), f"attribute {i} name")
            if name in out:
                raise _fail(f"attribute {name!r}: expected once, got twice")
            out[name] = _attr_value(_obj(item.get("AT"), f"attribute {name!r}"), name)
        return out

    # Ops.

    def _emit(
        self,
        block: int,
        op_type: str,
        inputs: Mapping[str, Sequence[str]],
        outputs: Mapping[str, Sequence[str]],
        attrs: Mapping[str, Any],
    ) -> None:
        legacy = self.program.blocks[block]
        if self.origin is not None:
            self.result.origins[(block, len(legacy.ops))] = self.origin
        op = legacy.ops.add()
        op.type = op_type
        for slot, names in inputs.items():
            op.inputs.add(parameter=slot, arguments=list(names))
        for slot, names in outputs.items():
            op.outputs.add(parameter=slot, arguments=list(names))
        for name, value in attrs.items():
            set_attr(op.attrs.add(), name, value)

    def _op(self, op: dict[str, Any], name: str, block: int) -> None:
        if name == "builtin.parameter":
            self._parameter(op, block)
        elif name == "pd_op.data":
            self._data(op, block)
        elif name == "pd_op.fetch":
            self._fetch(op, block)
        elif name in ("pd_op.full", "pd_op.full_int_array"):
            self._constant(op, name, block)
        elif name == "builtin.combine":
            self._combine(op)
        elif name == "builtin.split":
            self._split(op)
        elif name == "pd_op.if":
            self._if(op, block)
        elif name == "pd_op.while":
            self._while(op, block)
        elif name in STRUCTURAL:
            self.result.problems.append(
                (
                    FormatError(
                        "OP_UNKNOWN",
                        f"expected a supported op, got {name} (not supported in PIR programs yet)",
                    ),
                    self.origin,
                )
            )
            self._unknown(op, name, block)
        else:
            mapped = OPS.get(name) or OPS.get(name.rstrip("_"))
            if mapped is None:
                self._unknown(op, name, block)
            else:
                self._mapped(op, name, mapped, block)

    def _no_operands(self, op: dict[str, Any], name: str) -> None:
        """Ops Paddle writes without operands (data, full, parameter): each operand given is
        still looked up, so an undefined one is PIR_VALUE_UNDEFINED as on any other op."""
        refs = _list(op.get("I", []), f"{name} operands")
        for i, ref in enumerate(refs):
            self._lookup(ref, f"{name} operand {i}")
        if refs:
            raise self._fail_here(f"expected no operands, got {len(refs)}", "PIR_UNSUPPORTED")

    def _parameter(self, op: dict[str, Any], block: int) -> None:
        self._no_operands(op, "builtin.parameter")
        attrs = _list(op.get("A"), "parameter attributes")
        if len(attrs) != 4:
            raise _fail(f"builtin.parameter: expected 4 attributes, got {len(attrs)}")
        name = _str(attrs[3], "parameter name")
        if block != 0:
            raise _fail(f"builtin.parameter {name!r}: expected in the top block, got block {block}")
        ((vid, tt),) = self._one_result(op)
        dtype, dims = self._tensor_type(tt, f"parameter {name!r}")
        persistable = _persistable(op, name)
        if self.parameters.get(name) == (dtype, dims, persistable):
            # One var under one name, read through several parameter ops: Paddle's static
            # nn.LSTM names every layer's (empty) dropout state `dropout_state__non_persistable`.
            self._define(vid, _Value((name,), dtype, dims))
            return
        self._declare(0, name, dtype, dims, persistable=persistable)
        self.parameters[name] = (dtype, dims, persistable)
        self._define(vid, _Value((name,), dtype, dims))

    def _one_result(self, op: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        results = self._results(op)
        if len(results) != 1:
            raise _fail(f"expected 1 result, got {len(results)}")
        return results

    def _data(self, op: dict[str, Any], block: int) -> None:
        self._no_operands(op, "pd_op.data")
        attrs = self._plain_attrs(op)
        name = attrs.get("name")
        if not isinstance(name, str) or block != 0:
            raise _fail("pd_op.data: expected a string `name` in the top block")
        ((vid, tt),) = self._one_result(op)
        dtype, dims = self._tensor_type(tt, f"feed {name!r}")
        self._holder("feed", pb.VarType.FEED_MINIBATCH)
        self._declare(0, name, dtype, dims)
        self.program.blocks[0].vars[-1].need_check_feed = True
        self._emit(0, "feed", {"X": ["feed"]}, {"Out": [name]}, {"col": self.feeds})
        self.feeds += 1
        self._define(vid, _Value((name,), dtype, dims))

    def _fetch(self, op: dict[str, Any], block: int) -> None:
        inputs = _list(op.get("I"), "fetch operands")
        if len(inputs) != 1 or block != 0:
            raise _fail(f"pd_op.fetch: expected 1 operand in the top block, got {len(inputs)}")
        value = self._lookup(inputs[0], "fetch operand")
        if value is None or value.vector:
            raise _fail("pd_op.fetch: expected a tensor operand, got none")
        wanted = self._plain_attrs(op).get("name")
        self._materialize(value)
        source = value.names[0]
        if isinstance(wanted, str) and wanted != source and wanted not in self.declared:
            # A fed or parameter value fetched as is: copy it to the fetch's name.
            self._declare(0, wanted, value.dtype, value.dims)
            self._emit(0, "assign", {"X": [source]}, {"Out": [wanted]}, {})
            source = wanted
        self._holder("fetch", pb.VarType.FETCH_LIST)
        self._emit(0, "fetch", {"X": [source]}, {"Out": ["fetch"]}, {"col": self.fetches})
        self.fetches += 1
        for vid, _ in self._results(op):
            self._define(vid, value)

    def _constant(self, op: dict[str, Any], name: str, block: int) -> None:
        self._no_operands(op, name)
        attrs = self._plain_attrs(op)
        dtype_attr = attrs.get("dtype")
        if dtype_attr is not None and (
            not isinstance(dtype_attr, int) or isinstance(dtype_attr, bool)
        ):
            raise self._fail_here(
                f"expected a dtype in `dtype`, got {_kind(dtype_attr)}", "ATTR_TYPE"
            )
        shape = attrs.get("shape", [])
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape
        ):
            raise self._fail_here(
                f"expected a list of integers in `shape`, got {_kind(shape)}", "ATTR_TYPE"
            )
        ((vid, tt),) = self._one_result(op)
        dtype, dims = self._tensor_type(tt, name)
        if name == "pd_op.full_int_array":
            values = attrs.get("value")
            if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
                raise _fail("pd_op.full_int_array: expected a list of integers in `value`")
            const: tuple[Any, ...] = tuple(values)
        else:
            value = attrs.get("value")
            if not isinstance(value, (int, float)):
                raise _fail("pd_op.full: expected a number in `value`")
            integral = attrs.get("dtype") in _INTEGER_DTYPES
            if integral and not float(value).is_integer():
                raise _fail(
                    f"pd_op.full: expected an integer value for an integer dtype, got {value}"
                )
            const = (int(value) if integral else value,)
        origin = {"name": name, "block": block, "attrs": attrs}
        var = self._var_name(vid, name)
        scalar = name == "pd_op.full"
        self._define(vid, _Value((var,), dtype, dims, const, origin, scalar=scalar))

    def _materialize(self, value: _Value) -> None:
        """Writes the op of a folded constant the first time a tensor operand needs it."""
        spec = value.const_op
        if spec is None:
            return
        value.const_op = None
        name, block, attrs = spec["name"], spec["block"], spec["attrs"]
        out = value.names[0]
        self._declare(block, out, value.dtype, value.dims)
        dtype = attrs.get("dtype", value.dtype)
        if name == "pd_op.full_int_array":
            legacy_attrs: dict[str, Any] = {
                "shape": [len(value.const or ())],
                "dtype": dtype,
                "values": Attr(pb.SCALARS, list(value.const or ())),
            }
            self._emit(block, "assign_value", {}, {"Out": [out]}, legacy_attrs)
        else:
            shape = attrs.get("shape", [])
            number = (value.const or (0,))[0]
            self._emit(
                block,
                "fill_constant",
                {},
                {"Out": [out]},
                {
                    "shape": Attr(pb.LONGS, list(shape)),
                    "dtype": dtype,
                    "value": Attr(pb.FLOAT, float(number)),
                    "str_value": repr(number) if isinstance(number, int) else "",
                },
            )

    def _combine(self, op: dict[str, Any]) -> None:
        names: list[str] = []
        for i, ref in enumerate(_list(op.get("I"), "combine operands")):
            value = self._lookup(ref, f"combine operand {i}")
            if value is None or value.vector:
                raise _fail("builtin.combine: expected tensor operands")
            self._materialize(value)
            names.extend(value.names)
        ((vid, _),) = self._one_result(op)
        self._define(vid, _Value(tuple(names), None, (), vector=True))

    def _split(self, op: dict[str, Any]) -> None:
        inputs = _list(op.get("I"), "split operands")
        if len(inputs) != 1:
            raise _fail("builtin.split: expected 1 operand")
        value = self._lookup(inputs[0], "split operand")
        results = self._results(op)
        if value is None or not value.vector or len(results) != len(value.names):
            raise _fail(f"builtin.split: expected a vector of {len(results)} tensors")
        for (vid, tt), name in zip(results, value.names, strict=True):
            dtype, dims = self._tensor_type(tt, "split result")
            self._define(vid, _Value((name,), dtype, dims))

    # Control flow: PIR's SSA regions become Paddle's legacy sub-blocks, written the way Paddle's
    # own cond / while_loop write them, so that the same structural rules apply.

    def _regions(self, op: dict[str, Any], name: str, count: int) -> list[dict[str, Any]]:
        regions = _list(op.get("regions"), f"{name} regions")
        if len(regions) != count:
            raise _fail(f"{name}: expected {count} regions, got {len(regions)}")
        blocks = []
        for region in regions:
            inner = _list(_obj(region, f"{name} region").get("blocks"), f"{name} region blocks")
            if len(inner) != 1:
                raise _fail(f"{name}: expected 1 block per region, got {len(inner)}")
            blocks.append(_obj(inner[0], f"{name} block"))
        return blocks

    def _sub_block(
        self, body: dict[str, Any], parent: int, args: Sequence[str]
    ) -> tuple[int, list[_Value], set[str]]:
        """Converts one region's block; returns its legacy index, the values its cf.yield gives
        back, and the enclosing-block names it reads."""
        if len(self.program.blocks) >= MAX_BLOCKS:
            raise _fail(f"expected at most {MAX_BLOCKS} blocks, got more", "PROGRAM_TOO_COMPLEX")
        legacy = self.program.blocks.add()
        legacy.idx, legacy.parent_idx = len(self.program.blocks) - 1, parent
        ops = _list(body.get("ops"), "block ops", MAX_OPS)
        if not ops or not isinstance(ops[-1], dict) or ops[-1].get("#") != "2.yield":
            raise _fail(f"block {legacy.idx}: expected to end with cf.yield")
        self.scopes.append({})
        reads: set[str] = set()
        self.frames.append((len(self.scopes) - 1, reads))
        arg_refs = _list(body.get("args"), "block args")
        if len(arg_refs) != len(args):
            raise _fail(f"block {legacy.idx}: expected {len(args)} arguments, got {len(arg_refs)}")
        for ref, var in zip(arg_refs, args, strict=True):
            ref = _obj(ref, "block argument")
            dtype, dims = self._tensor_type(_obj(ref.get("TT"), "block argument type"), var)
            self._define(_int(ref.get("#"), "block argument id"), _Value((var,), dtype, dims))
        owner = self.origin
        self._block(ops[:-1], legacy.idx, legacy.idx)
        yielded = []
        for i, ref in enumerate(_list(ops[-1].get("I"), "yield operands")):
            value = self._lookup(ref, f"yield operand {i}")
            if value is None or value.vector:
                raise _fail(f"block {legacy.idx}: expected cf.yield of tensors")
            self._materialize(value)
            yielded.append(value)
        self.frames.pop()
        self.scopes.pop()
        self.origin = owner
        return legacy.idx, yielded, reads - set(args)

    def _scope_var(self, block: int) -> str:
        name = f"scope_{len(self.declared)}.tmp"
        self.declared.add(name)
        var = self.program.blocks[block].vars.add()
        var.name = name
        var.type.type = pb.VarType.STEP_SCOPES
        return name

    def _fresh(self, block: int, stem: str, dtype: int | None, dims: Sequence[int]) -> str:
        name = f"{stem}_{len(self.declared)}.tmp"
        self._declare(block, name, dtype, dims)
        return name

    def _if(self, op: dict[str, Any], block: int) -> None:
        operands = _list(op.get("I"), "pd_op.if operands")
        if len(operands) != 1:
            raise _fail(f"pd_op.if: expected 1 operand, got {len(operands)}")
        cond = self._lookup(operands[0], "pd_op.if condition")
        if cond is None or cond.vector:
            raise _fail("pd_op.if: expected a condition tensor")
        self._materialize(cond)
        results = self._results(op)
        types = [self._tensor_type(tt, "pd_op.if result") for _, tt in results]
        branches = self._regions(op, "pd_op.if", 2)
        origin = self.origin
        not_cond = self._fresh(block, "logical_not", pb.VarType.BOOL, cond.dims)
        outs: list[list[str]] = []
        for k, body in enumerate(branches):
            sub, yielded, reads = self._sub_block(body, block, ())
            if len(yielded) != len(results):
                raise _fail(f"pd_op.if: expected {len(results)} yielded values, got {len(yielded)}")
            names = [self._fresh(block, "cond_out", d, s) for d, s in types]
            for value, target in zip(yielded, names, strict=True):
                self._emit(sub, "assign", {"X": [value.names[0]]}, {"Out": [target]}, {})
            self.origin = origin
            if k == 1:
                self._emit(block, "logical_not", {"X": [cond.names[0]]}, {"Out": [not_cond]}, {})
            condition = cond.names[0] if k == 0 else not_cond
            self._emit(
                block,
                "conditional_block",
                {"Cond": [condition], "Input": sorted(reads)},
                {"Out": names, "Scope": [self._scope_var(block)]},
                {"sub_block": Attr(pb.BLOCK, sub), "is_scalar_condition": True},
            )
            outs.append(names)
        mask = self._fresh(block, "cast", pb.VarType.INT32, cond.dims)
        self._emit(
            block,
            "cast",
            {"X": [cond.names[0]]},
            {"Out": [mask]},
            {
                "in_dtype": Attr(pb.INT, pb.VarType.BOOL),
                "out_dtype": Attr(pb.INT, pb.VarType.INT32),
            },
        )
        for (vid, _), (dtype, dims), t, f in zip(results, types, outs[0], outs[1], strict=True):
            out = self._var_name(vid, "select_input")
            self._declare(block, out, dtype, dims)
            self._emit(block, "select_input", {"X": [f, t], "Mask": [mask]}, {"Out": [out]}, {})
            self._define(vid, _Value((out,), dtype, dims))

    def _while(self, op: dict[str, Any], block: int) -> None:
        operands = _list(op.get("I"), "pd_op.while operands")
        if not operands:
            raise _fail("pd_op.while: expected a condition operand")
        values = [self._lookup(ref, f"pd_op.while operand {i}") for i, ref in enumerate(operands)]
        if any(v is None or v.vector for v in values):
            raise _fail("pd_op.while: expected tensor operands")
        cond, *carried = [v for v in values if v is not None]
        results = self._results(op)
        if len(results) != len(carried):
            raise _fail(f"pd_op.while: expected {len(carried)} results, got {len(results)}")
        # Fresh loop variables: the loop rewrites them in place, never a feed or a parameter.
        loop_vars = []
        for value in [cond, *carried]:
            self._materialize(value)
            var = self._fresh(block, "loop_var", value.dtype, value.dims)
            self._emit(block, "assign", {"X": [value.names[0]]}, {"Out": [var]}, {})
            loop_vars.append(var)
        origin = self.origin
        (body,) = self._regions(op, "pd_op.while", 1)
        written_from = len(self.written_in_place)
        sub, yielded, reads = self._sub_block(body, block, loop_vars[1:])
        written = sorted(reads & set(self.written_in_place[written_from:]) - set(loop_vars))
        if len(yielded) != len(loop_vars):
            raise _fail(
                f"pd_op.while: expected {len(loop_vars)} yielded values, got {len(yielded)}"
            )
        for k in [*range(1, len(loop_vars)), 0]:
            source = yielded[k].names[0]
            if source != loop_vars[k]:
                self._emit(sub, "assign", {"X": [source]}, {"Out": [loop_vars[k]]}, {})
        self.origin = origin
        self._emit(
            block,
            "while",
            {"X": sorted(reads | set(loop_vars[1:])), "Condition": [loop_vars[0]]},
            {"Out": loop_vars + written, "StepScopes": [self._scope_var(block)]},
            {"sub_block": Attr(pb.BLOCK, sub), "is_test": True},
        )
        for (vid, _), var, value in zip(results, loop_vars[1:], carried, strict=True):
            self._define(vid, _Value((var,), value.dtype, value.dims))

    def _unknown(self, op: dict[str, Any], name: str, block: int) -> None:
        """An op outside the table keeps its PIR name: validation reports it as OP_UNKNOWN."""
        inputs: list[str] = []
        for i, ref in enumerate(_list(op.get("I"), "operands")):
            value = self._lookup(ref, f"operand {i}")
            if value is not None:
                self._materialize(value)
                inputs.extend(value.names)
        outputs = self._define_results(op, name, block)
        self._emit(block, name, {"X": inputs}, {"Out": outputs}, {})

    def _define_results(self, op: dict[str, Any], name: str, block: int) -> list[str]:
        names = []
        for vid, tt in self._results(op):
            if tt.get("#") == "0.t_vec":
                raise _fail(f"{name}: expected tensor results, got a vector", "PIR_UNSUPPORTED")
            dtype, dims = self._tensor_type(tt, f"{name} result")
            var = self._var_name(vid, name)
            if dtype is not None:
                self._declare(block, var, dtype, dims)
                self._define(vid, _Value((var,), dtype, dims))
                names.append(var)
        return names

    def _mapped(self, op: dict[str, Any], name: str, mapped: OpMap, block: int) -> None:
        operands = _list(op.get("I"), "operands")
        if len(operands) != len(mapped.inputs):
            raise _fail(f"{name}: expected {len(mapped.inputs)} operands, got {len(operands)}")
        attrs = self._attrs(op)
        legacy_attrs: dict[str, Any] = {}
        for key, value in attrs.items():
            target = mapped.attrs.get(key, key)
            if key in DROPPED_ATTRS or target is None or value is None:
                continue
            if key in mapped.scalars:
                legacy_attrs[target] = Attr(pb.SCALARS, _scalars(value, key))
            elif value == [] and key in mapped.empty:
                legacy_attrs[target] = Attr(mapped.empty[key], [])
            else:
                legacy_attrs[target] = _legacy_attr(value)
        legacy_attrs.update(mapped.fixed)
        inputs: dict[str, list[str]] = {}
        first_dtype: int | None = None
        result_dtype = self._first_result_dtype(op, name) if mapped.constants_like_result else None
        for i, (spec, ref) in enumerate(zip(mapped.inputs, operands, strict=True)):
            value = self._lookup(ref, f"{name} operand {i}")
            if i == 0 and value is not None:
                first_dtype = value.dtype
            if value is not None and value.const_op is not None and result_dtype is not None:
                value.dtype = result_dtype
                value.const_op = {
                    **value.const_op,
                    "attrs": {**value.const_op["attrs"], "dtype": result_dtype},
                }
            self._operand(name, i, spec, value, inputs, legacy_attrs)
        if mapped.input_dtype_attr is not None and first_dtype is not None:
            legacy_attrs[mapped.input_dtype_attr] = first_dtype
        for key, default in mapped.defaults.items():
            legacy_attrs.setdefault(key, default)
        target = self._in_place_target(name, mapped, operands, inputs)
        outputs = self._mapped_results(op, name, mapped, block, target)
        if mapped.legacy in _REDUCE_OPS and legacy_attrs.get("dim") == []:
            legacy_attrs["reduce_all"] = True
        cast = self._legacy_result(mapped, outputs, block)
        self._emit(block, mapped.legacy, inputs, outputs, legacy_attrs)
        if cast is not None:
            self._emit(block, "cast", *cast)

    def _in_place_target(
        self, name: str, mapped: OpMap, operands: list[Any], inputs: dict[str, list[str]]
    ) -> str | None:
        """The var an in-place PIR op (`increment_`) overwrites: its result is that var again,
        and the value, if a folded constant, is a constant no more."""
        if mapped.in_place is None or not name.endswith("_"):
            return None
        index = mapped.inputs.index(mapped.in_place)
        value = self._lookup(operands[index], f"{name} operand {index}")
        if value is None or value.vector:
            raise _fail(f"{name}: expected a tensor to write in place")
        value.const = None
        (target,) = inputs[mapped.in_place]
        self.written_in_place.append(target)
        return target

    def _first_result_dtype(self, op: dict[str, Any], name: str) -> int | None:
        results = self._results(op)
        return self._tensor_type(results[0][1], f"{name} result")[0] if results else None

    def _legacy_result(
        self, mapped: OpMap, outputs: dict[str, list[str]], block: int
    ) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, Any]] | None:
        """Where the legacy op yields another dtype than the PIR op (shape: int32, shape64:
        int64), it writes a fresh var that a cast then converts: (inputs, outputs, attrs)."""
        if mapped.legacy_dtype is None or not outputs:
            return None
        slot = mapped.outputs[0]
        (target,) = outputs[slot]
        var = self._find_var(block, target)
        dtype = int(var.type.dense_tensor.tensor.data_type)
        if dtype == mapped.legacy_dtype:
            return None
        dims = list(var.type.dense_tensor.tensor.dims)
        narrow = self._fresh(block, mapped.legacy, mapped.legacy_dtype, dims)
        outputs[slot] = [narrow]
        attrs = {
            "in_dtype": Attr(pb.INT, mapped.legacy_dtype),
            "out_dtype": Attr(pb.INT, dtype),
        }
        return {"X": [narrow]}, {"Out": [target]}, attrs

    def _find_var(self, block: int, name: str) -> pb.VarDesc:
        for var in reversed(self.program.blocks[block].vars):
            if var.name == name:
                return var
        raise _fail(f"expected a declared variable {name!r}")

    def _operand(
        self,
        name: str,
        i: int,
        spec: str,
        value: _Value | None,
        inputs: dict[str, list[str]],
        attrs: dict[str, Any],
    ) -> None:
        if spec == "-":
            return  # no legacy slot: the tensor an in-place PIR op overwrites
        if spec == "":
            if value is not None:
                raise _fail(f"{name} operand {i}: expected none, got a value", "PIR_UNSUPPORTED")
            return
        if value is None:
            return  # an absent optional operand
        if spec.startswith("="):
            attr, _, slot = spec[1:].partition("|")
            if value.const is not None:
                folded = _folded(value, self.max_folded)
                if folded is None:
                    raise self._fail_here(
                        f"operand {i}: expected a constant of at most {self.max_folded} "
                        f"elements to fold into `{attr}`, got dims {list(value.dims)}",
                        "PROGRAM_TOO_COMPLEX",
                    )
                attrs[attr] = folded
                return
            if not slot:
                raise _fail(
                    f"{name} operand {i}: expected a constant for `{attr}`, got a computed tensor",
                    "PIR_UNSUPPORTED",
                )
            spec = slot
        variadic = spec.endswith("*")
        if variadic != value.vector:
            raise _fail(
                f"{name} operand {i}: expected {'a vector' if variadic else 'a tensor'}, got {'a vector' if value.vector else 'a tensor'}"
            )
        self._materialize(value)
        inputs[spec.rstrip("*")] = list(value.names)

    def _mapped_results(
        self, op: dict[str, Any], name: str, mapped: OpMap, block: int, target: str | None = None
    ) -> dict[str, list[str]]:
        results = self._results(op)
        if len(results) > len(mapped.outputs):
            raise _fail(
                f"{name}: expected at most {len(mapped.outputs)} results, got {len(results)}"
            )
        outputs: dict[str, list[str]] = {}
        for slot, (vid, tt) in zip(mapped.outputs, results, strict=False):
            if slot.endswith("*"):
                types = _list(tt.get("D"), f"{name} vector result")
                names = []
                for k, element in enumerate(types):
                    dtype, dims = self._tensor_type(
                        _obj(element, "vector element"), f"{name} result"
                    )
                    var = f"{self._var_name(vid, name)}_{k}"
                    self._declare(block, var, dtype, dims)
                    names.append(var)
                self._define(vid, _Value(tuple(names), None, (), vector=True))
                outputs[slot[:-1]] = names
                continue
            dtype, dims = self._tensor_type(tt, f"{name} result")
            if target is not None and slot == mapped.outputs[0]:
                self._define(vid, _Value((target,), dtype, dims))
                outputs[slot] = [target]
                continue
            var = self._var_name(vid, name)
            if dtype is None:
                continue
            self._declare(block, var, dtype, dims)
            self._define(vid, _Value((var,), dtype, dims))
            outputs[slot] = [var]
        return outputs


_SCALAR_KINDS: Final = {
    "0.a_i32": int,
    "0.a_i64": int,
    "0.a_f32": float,
    "0.a_f64": float,
    "0.a_bool": bool,
    "0.a_str": str,
}


def _attr_value(at: Mapping[str, Any], name: str) -> Any:
    kind = _str(at.get("#"), f"attribute {name!r} kind")
    data = at.get("D")
    if data is None and kind in ("0.a_f32", "0.a_f64") and "VD" in at:
        special = _SPECIAL_FLOATS.get(at["VD"]) if isinstance(at["VD"], str) else None
        if special is None:
            raise _fail(
                f"attribute {name!r}: expected one of {sorted(_SPECIAL_FLOATS)}, got {at['VD']!r}"
            )
        return _Typed(kind, special)
    expected = _SCALAR_KINDS.get(kind)
    if expected is not None:
        ok = isinstance(data, expected) and (expected is bool or not isinstance(data, bool))
        if expected is float and isinstance(data, int) and not isinstance(data, bool):
            data, ok = float(data), True
        if not ok:
            raise _fail(
                f"attribute {name!r}: expected {expected.__name__} for {kind}, got {_kind(data)}"
            )
        if kind == "0.a_i32" and isinstance(data, int) and not -(2**31) <= data < 2**31:
            raise _fail(f"attribute {name!r}: expected an int32, got {data}")
        if kind == "0.a_f32" and isinstance(data, float) and abs(data) > _FLOAT32_MAX:
            raise _fail(f"attribute {name!r}: expected a float32, got {data}")
        return _Typed(kind, data)
    if kind == "0.a_array":
        return [
            _attr_value(_obj(v, f"attribute {name!r} item"), name)
            for v in _list(data, f"attribute {name!r}", 1 << 20)
        ]
    if kind == "1.a_intarray":
        return [
            _int(v, f"attribute {name!r} item") for v in _list(data, f"attribute {name!r}", 1 << 20)
        ]
    if kind == "1.a_dtype":
        if data == _UNDEFINED_DTYPE:
            return None  # `sum` and friends: the result keeps the input's dtype
        dtype = _DTYPE_NAMES.get(_str(data, f"attribute {name!r}"))
        if dtype is None:
            raise _fail(
                f"attribute {name!r}: expected a dtype from {sorted(_DTYPE_NAMES)}, got {data!r}",
                "VAR_TYPE",
            )
        return _Typed("dtype", dtype)
    if kind == "1.a_place":
        return None
    raise _fail(f"attribute {name!r}: expected a known attribute kind, got {kind!r}", "ATTR_TYPE")


@dataclass(frozen=True, slots=True)
class _Typed:
    kind: str
    value: Any


def _plain(value: Any) -> Any:
    if isinstance(value, _Typed):
        return value.value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


_LIST_KINDS: Final = {
    "0.a_i32": pb.INTS,
    "0.a_i64": pb.LONGS,
    "0.a_f32": pb.FLOATS,
    "0.a_f64": pb.FLOAT64S,
    "0.a_bool": pb.BOOLEANS,
    "0.a_str": pb.STRINGS,
}
_ONE_KINDS: Final = {
    "0.a_i32": pb.INT,
    "0.a_i64": pb.LONG,
    "0.a_f32": pb.FLOAT,
    "0.a_f64": pb.FLOAT64,
    "0.a_bool": pb.BOOLEAN,
    "0.a_str": pb.STRING,
    "dtype": pb.INT,
}


def _scalars(value: Any, name: str) -> list[int | float | bool]:
    """A PIR list of numbers as the values of a legacy SCALARS attribute."""
    plain = _plain(value)
    if not isinstance(plain, list) or not all(isinstance(v, (int, float, bool)) for v in plain):
        raise _fail(
            f"attribute {name!r}: expected a list of numbers, got {_kind(plain)}", "ATTR_TYPE"
        )
    return plain


def _legacy_attr(value: Any) -> Any:
    """A PIR attribute as the legacy AttrType Paddle would have written."""
    if isinstance(value, _Typed):
        return Attr(_ONE_KINDS[value.kind], value.value)
    if isinstance(value, list):
        typed = [v for v in value if isinstance(v, _Typed)]
        if typed and len(typed) == len(value) and len({v.kind for v in typed}) == 1:
            kind = _LIST_KINDS.get(typed[0].kind)
            if kind is None:
                raise _fail("expected a list attribute of numbers or strings", "ATTR_TYPE")
            return Attr(kind, [v.value for v in typed])
        if not value:
            return Attr(pb.INTS, [])
        plain = _plain(value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in plain):
            return Attr(pb.LONGS, plain)
        raise _fail("expected an attribute list of one kind, got mixed kinds", "ATTR_TYPE")
    return value
