"""Answers encoded where they are computed: the worker writes the V2 response (JSON, or a JSON
header followed by raw tensor bytes) straight into its arena, within the request's answer
budget and its deadline, and the server reads it back in bounded pieces (`Answer.chunks`).

The budget is checked twice, by the worker: before the run, from the outputs' re-inferred
shapes (`check_before_run`: the answer's least size, so only what is certainly over is refused
there), and while the JSON text is written (outputs whose size the data decides, and numbers
longer than their least text). Over it: 413 RESPONSE_OVER_BUDGET, with the figures.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import numpy as np
import orjson

from server.errors import ResponseOverBudget

# Elements encoded to JSON text per slice: the budget and the stop are looked at in between.
_SLICE: Final = 64 * 1024
# The least JSON text of one element and its comma: "0," for an integer, "0.0," for a float
# (Python writes floats with a point), "true," for a boolean.
_LEAST_JSON: Final[Mapping[str, int]] = {"b": 5, "i": 2, "u": 2, "f": 4}
_DUMPS: Final = json.JSONEncoder(separators=(",", ":")).encode
# The same few names (model, version, outputs, datatypes) in every answer: their JSON text once.
_NAME_TEXT: Final = functools.lru_cache(maxsize=1024)(_DUMPS)
_MIB: Final = 1024 * 1024
_FLUSH_BYTES: Final = 64 * 1024  # JSON text gathered before it is written to the sink
CHUNK_BYTES: Final = 1024 * 1024  # what the server reads of an answer at a time


@dataclass(frozen=True, slots=True)
class Budget:
    """The most bytes an answer may take (0: no limit), and the most its JSON text may."""

    max_bytes: int = 0
    max_json_bytes: int = 0


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """One requested output: its V2 datatype name, the numpy dtype of its wire values, and
    whether it is sent as raw bytes (`binary`) or JSON numbers. `bf16`: wire values are the
    upper halves of float32s, written to JSON as the floats they stand for."""

    name: str
    datatype: str
    dtype: str
    binary: bool
    bf16: bool = False


@dataclass(frozen=True, slots=True)
class AnswerSpec:
    """What a worker needs to encode one request's answer."""

    model_name: str
    model_version: str
    request_id: str | None
    outputs: tuple[OutputSpec, ...]
    budget: Budget
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(self._fields()))

    def _fields(self) -> tuple[str, str, str | None, tuple[OutputSpec, ...], Budget]:
        return self.model_name, self.model_version, self.request_id, self.outputs, self.budget

    def __hash__(self) -> int:
        # Hashed with every answer (the header's memo, a batch's distinct specs): computed once,
        # not field by field through each output's dataclass hash.
        return self._hash

    def __reduce__(self) -> tuple[type[AnswerSpec], tuple[object, ...]]:
        # Rebuilt from its fields: a string's hash differs from one process to another.
        return AnswerSpec, self._fields()

    def wire(self) -> WireSpec:
        """The spec as plain tuples, for the pipe to the worker (`from_wire` there).

        NOTE: sent with every request. Pickled as these dataclasses, each object costs a class
        lookup and dataclasses' __getstate__/__setstate__: ~13 us a request for a one-output
        spec, both ends together, against ~2 us as tuples (a tenth of a small model's run)."""
        outputs = tuple((o.name, o.datatype, o.dtype, o.binary, o.bf16) for o in self.outputs)
        budget = (self.budget.max_bytes, self.budget.max_json_bytes)
        return (self.model_name, self.model_version, self.request_id, outputs, budget)

    @classmethod
    def from_wire(cls, wire: WireSpec) -> AnswerSpec:
        name, version, request_id, outputs, budget = wire
        return cls(
            name, version, request_id, tuple(OutputSpec(*o) for o in outputs), Budget(*budget)
        )


@functools.lru_cache(maxsize=256)
def spec_of(wire: WireSpec) -> AnswerSpec:
    """`AnswerSpec.from_wire`, made once per distinct spec: a model's requests repeat theirs
    (the worker's; the dataclasses cost ~4 us a request to build)."""
    return AnswerSpec.from_wire(wire)


# AnswerSpec.wire(): (model name, version, request id, outputs, (max bytes, max JSON bytes))
WireSpec = tuple[
    str, str, str | None, tuple[tuple[str, str, str, bool, bool], ...], tuple[int, int]
]


@dataclass(frozen=True, slots=True)
class Encoded:
    """Where a worker wrote an answer in its arena; `header_length` None: all of it is JSON."""

    offset: int
    length: int
    header_length: int | None


# An Encoded as the worker sends it back: (offset, length, header_length), plain for the pipe
# (see AnswerSpec.wire).
EncodedWire = tuple[int, int, int | None]


class Sink(Protocol):
    def write(self, data: bytes | memoryview) -> None: ...


def member_rows(
    outputs: Mapping[str, np.ndarray], rows: Sequence[int]
) -> list[dict[str, np.ndarray]] | None:
    """Each batch member's rows (`rows` each) of every output, as views; None when an output is
    not batch-major (0-d, or its first dim is not the batch's rows)."""
    total = sum(rows)
    if any(v.ndim == 0 or v.shape[0] != total for v in outputs.values()):
        return None
    ends = itertools.accumulate(rows)
    # plain slices: views, as np.split's, at a tenth of its cost per member
    return [
        {name: value[end - own : end] for name, value in outputs.items()}
        for own, end in zip(rows, ends, strict=True)
    ]


# -- the budget, before the run ------------------------------------------------------------


def check_before_run(
    answers: Sequence[AnswerSpec], rows: Sequence[int], shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """Refuses an answer certainly over its budget, from the run's re-inferred output `shapes`
    (a dim the data decides counted 0). A batch (`rows` per member) gives each member its rows
    of every batch-major output; the first member over its budget fails the run."""
    if len(answers) == 1:  # one request: all the rows are its own
        _within(answers[0], *_least_size(answers[0], shapes), at_least=True)
        return
    total = sum(rows)
    # A batch's members mostly ask alike (the same spec object: spec_of) for as many rows:
    # each distinct pair is checked once, in the members' order.
    for spec, own in dict.fromkeys(zip(answers, rows, strict=True)):
        mine = {
            name: (own, *shape[1:]) if shape and shape[0] == total else shape
            for name, shape in shapes.items()
        }
        _within(spec, *_least_size(spec, mine), at_least=True)


def _least_size(spec: AnswerSpec, shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, int, int]:
    """(JSON text bytes, binary bytes, numbers in JSON) the answer takes at least."""
    json_bytes, binary_bytes, numbers = 256, 0, 0  # the document's own keys, names, shapes
    for out in spec.outputs:
        count = math.prod(max(d, 0) for d in shapes.get(out.name, ()))
        if out.binary:
            binary_bytes += count * _itemsize(out.dtype)
        else:
            kind = "f" if out.bf16 else _kind(out.dtype)
            json_bytes += count * _LEAST_JSON.get(kind, 2)
            numbers += count
    return json_bytes, binary_bytes, numbers


@functools.cache
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


@functools.cache
def _kind(dtype: str) -> str:
    return np.dtype(dtype).kind


def _within(
    spec: AnswerSpec, json_bytes: int, binary_bytes: int, numbers: int, *, at_least: bool
) -> None:
    budget = spec.budget
    would = "would be at least" if at_least else "is more than"
    if budget.max_json_bytes and json_bytes > budget.max_json_bytes:
        raise ResponseOverBudget(
            f"this answer {would} {_size(json_bytes)} as JSON ({numbers:,} numbers), at most "
            f"{_size(budget.max_json_bytes)}; ask for binary outputs or fewer rows"
        )
    if budget.max_bytes and json_bytes + binary_bytes > budget.max_bytes:
        raise ResponseOverBudget(
            f"this answer {would} {_size(json_bytes + binary_bytes)}, at most "
            f"{_size(budget.max_bytes)}; ask for fewer rows or fewer outputs"
        )


def _json_limit(budget: Budget, binary_bytes: int) -> int | None:
    """The most JSON text an answer with `binary_bytes` of raw outputs may have within both of
    the budget's caps (`_within`'s two checks as one comparison); None: no cap."""
    limits = [budget.max_json_bytes] if budget.max_json_bytes else []
    if budget.max_bytes:
        limits.append(budget.max_bytes - binary_bytes)
    return min(limits) if limits else None


def _size(count: int) -> str:
    """Bytes as people read them: MiB for a power-of-two cap, MB otherwise."""
    if count % _MIB == 0:
        return f"{count // _MIB} MiB"
    return f"{count / 1e6:,.0f} MB" if count >= 10**6 else f"{count:,} bytes"


# -- encoding, in the worker ---------------------------------------------------------------


def encode(
    spec: AnswerSpec,
    values: Mapping[str, np.ndarray],
    sink: Sink,
    stop: Callable[[], None],
) -> tuple[int, int | None]:
    """Writes the answer to `sink`: the JSON document (the JSON outputs' numbers in it), then
    each binary output's raw bytes. Returns (bytes written, the JSON header's length or None
    when all is JSON). `stop()` is called between slices and raises to stop (the deadline,
    a cancel); the JSON text is counted against the budget as it is written."""
    if all(out.binary for out in spec.outputs):
        return _encode_binary(spec, values, sink, stop)
    counter = _Counting(sink, spec, values)
    # The document json.dumps(doc, separators=(",", ":")) would write, field by field: strings
    # through json's own escaping, integers as str() writes them (as json does), without
    # building and walking a dict. The text between two outputs' numbers is counted and
    # written as one piece.
    text = _head(spec)
    raws: list[np.ndarray] = []
    for index, out in enumerate(spec.outputs):
        value = values[out.name]
        text += ("," if index else "") + _output_head(out, value.shape)
        if out.binary:
            raw = np.ascontiguousarray(value, dtype=out.dtype)
            raws.append(raw)
            text += _binary_size(raw.nbytes)
        else:
            counter.text(text + ',"data":[')
            _numbers(counter, value, out.bf16, stop)
            text = "]}"
    counter.text(text + "]}")
    counter.flush()
    header = counter.written
    for raw in raws:
        stop()
        sink.write(memoryview(raw.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
    return header + sum(r.nbytes for r in raws), header if raws else None


def _encode_binary(
    spec: AnswerSpec,
    values: Mapping[str, np.ndarray],
    sink: Sink,
    stop: Callable[[], None],
) -> tuple[int, int | None]:
    """`encode` of an answer whose outputs are all raw bytes (what binary clients ask for): its
    JSON header is counted against the budget once, whole, and a small answer (header and
    bytes under _FLUSH_BYTES) is one write to the sink."""
    arrays = [values[out.name] for out in spec.outputs]
    # the shapes as they are: ascontiguousarray makes a 0-d output 1-d
    header = _binary_header(spec, tuple(a.shape for a in arrays))
    raws = [
        np.ascontiguousarray(a, dtype=out.dtype)
        for a, out in zip(arrays, spec.outputs, strict=True)
    ]
    binary = sum(raw.nbytes for raw in raws)
    limit = _json_limit(spec.budget, binary)
    if limit is not None and len(header) > limit:
        _within(spec, len(header), binary, 0, at_least=False)
    if len(header) + binary < _FLUSH_BYTES:
        # contiguous arrays are buffers of their bytes (numpy's stubs do not say so)
        sink.write(b"".join([header, *raws]))  # type: ignore[list-item]
    else:
        sink.write(header)
        for raw in raws:
            stop()
            sink.write(memoryview(raw.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
    return len(header) + binary, len(header)


@functools.lru_cache(maxsize=256)
def _binary_header(spec: AnswerSpec, shapes: tuple[tuple[int, ...], ...]) -> bytes:
    """An all-binary answer's JSON header, from what alone decides it: the spec and the outputs'
    shapes (their sizes follow from the shapes and the spec's dtypes). Made once per distinct
    pair: a model's answers repeat theirs, and a batch's members mostly share one (spec_of
    gives alike requests one spec object; a request id makes its own)."""
    outputs = ",".join(
        _output_head(out, shape) + _binary_size(math.prod(shape) * _itemsize(out.dtype))
        for out, shape in zip(spec.outputs, shapes, strict=True)
    )
    return f"{_head(spec)}{outputs}]}}".encode()


def _head(spec: AnswerSpec) -> str:
    """The answer's text before its outputs: the model's name and version, the request's id."""
    text = f'{{"model_name":{_NAME_TEXT(spec.model_name)}'
    text += f',"model_version":{_NAME_TEXT(spec.model_version)}'
    if spec.request_id is not None:
        text += f',"id":{_DUMPS(spec.request_id)}'
    return text + ',"outputs":['


def _output_head(out: OutputSpec, shape: tuple[int, ...]) -> str:
    """An output's text before its data or its size: its name, datatype and shape."""
    dims = ",".join(map(str, shape))
    return f'{{"name":{_NAME_TEXT(out.name)},"datatype":{_NAME_TEXT(out.datatype)},"shape":[{dims}]'


def _binary_size(nbytes: int) -> str:
    """The rest of a binary output's text: the size of its bytes, which follow the header."""
    return f',"parameters":{{"binary_data_size":{nbytes}}}}}'


def _numbers(counter: _Counting, value: np.ndarray, bf16: bool, stop: Callable[[], None]) -> None:
    flat = value.reshape(-1)
    if bf16:
        flat = (flat.astype(np.uint32) << 16).view(np.float32)
    for start in range(0, flat.size, _SLICE):
        stop()
        if start:
            counter.text(",")
        counter.ascii(number_bytes(flat[start : start + _SLICE]))


def number_text(values: np.ndarray) -> str:
    """number_bytes as a string."""
    return str(number_bytes(values), "ascii")


def number_bytes(values: np.ndarray) -> memoryview:
    """A flat array's numbers (or true/false) as JSON text without its brackets, written in C
    by orjson instead of a Python object per element: floats as float64, the shortest digits
    that read back as the same double (Python's repr; an exponent may lack its leading zero:
    1e-7). NaN and infinities, which orjson writes as null, as json.dumps writes them.

    NOTE: bytes, not a string, and a view without the brackets, not a slice of them: each
    copy of a megabyte-sized text costs its pages' first touch (~1 ms per 3 MB), more than
    the copy itself."""
    if values.dtype.kind == "f":
        values = values.astype(np.float64)
        if not np.isfinite(values).all():
            return memoryview(_DUMPS(values.tolist()).encode())[1:-1]
    return memoryview(orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY))[1:-1]


class _Counting:
    """The sink, counting the JSON text against the budget before each piece is written.

    Pieces are gathered and written in one go once `_FLUSH_BYTES` are held, and at `flush()`:
    a small answer is one write into the arena, not one per piece (the text's pieces of a
    one-output answer are five or more)."""

    __slots__ = ("_binary", "_held", "_limit", "_numbers", "_pieces", "_sink", "_spec", "written")

    def __init__(self, sink: Sink, spec: AnswerSpec, values: Mapping[str, np.ndarray]) -> None:
        self._sink = sink
        self._spec = spec
        binary = numbers = 0
        for out in spec.outputs:
            size = int(values[out.name].size)
            if out.binary:
                binary += size * _itemsize(out.dtype)
            else:
                numbers += size
        self._binary, self._numbers = binary, numbers
        self._limit = _json_limit(spec.budget, binary)
        self._pieces: list[bytes] = []
        self._held = 0
        self.written = 0

    def text(self, piece: str) -> None:
        self.ascii(piece.encode())  # ASCII (json.dumps escapes the rest): characters == bytes

    def ascii(self, data: bytes | memoryview) -> None:
        self.written += len(data)
        if self._limit is not None and self.written > self._limit:
            _within(self._spec, self.written, self._binary, self._numbers, at_least=False)
        if len(data) >= _FLUSH_BYTES:  # a slice of numbers: written as it is, not joined
            self.flush()
            self._sink.write(data)
            return
        self._pieces.append(bytes(data))
        self._held += len(data)
        if self._held >= _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._pieces:
            pieces, self._pieces, self._held = self._pieces, [], 0
            self._sink.write(pieces[0] if len(pieces) == 1 else b"".join(pieces))


class BufferSink:
    """A sink into memory (small answers, tests, the service's in-process encoding)."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def write(self, data: bytes | memoryview) -> None:
        self.buffer += data


# -- reading an answer back, in the server -------------------------------------------------


class Answer:
    """One encoded answer: `length` bytes, a JSON header of `header_length` bytes first when
    binary outputs follow. Either copied out already (`data`) or read piece by piece from a
    file of its own (`read`, arena.Spill); `close()` frees that file, and is called once the
    answer is sent or dropped."""

    __slots__ = ("_data", "_on_close", "_read", "header_length", "length")

    def __init__(
        self,
        length: int,
        header_length: int | None,
        *,
        data: bytes | None = None,
        read: Callable[[int, int], bytes] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.length = length
        self.header_length = header_length
        self._data = data
        self._read = read
        self._on_close = on_close

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The answer's bytes, at most `size` at a time (the server never holds more)."""
        if self._data is not None:
            yield self._data
            return
        assert self._read is not None
        for start in range(0, self.length, size):
            yield self._read(start, min(size, self.length - start))

    def body(self) -> bytes:
        """All of it at once (small answers; tests)."""
        return self._data if self._data is not None else b"".join(self.chunks())

    @property
    def streamed(self) -> bool:
        """Read from its file as it is sent, not held in memory."""
        return self._data is None

    def close(self) -> None:
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()
