"""Large JSON tensors into numpy arrays and out again, without a second walk over their numbers.

Decoding: orjson builds a Python object per number, and `np.asarray` then walks those objects
again to find the array's type and shape; for a 1x3x224x224 FP32 input that walk, and the byte
scans the codec makes over the whole document, cost about as much as the parse. Here each
input's `data` array is cut out of the document before it is parsed: the rest (a few hundred
bytes) is parsed as usual with a placeholder string where each array was, and each array is
parsed alone, its characters telling its type (a fraction or an exponent anywhere: float64, as
numpy would find; only integers: int64, or what numpy finds). A flat array is parsed by
simdjson straight into a buffer of float64 or int64, no Python object per number (about 3x
orjson's parse alone); a nested one, or one simdjson refuses (a number out of range), by orjson
with numpy told the type, as before.

Nothing here refuses a request. Whatever is unusual (a data array holding anything but numbers,
nested deeper than MAX_NESTING, a placeholder that did not land on an input's `data`) raises
NotCut, and the codec's reference reading decodes the whole request instead, refusals included:
a request decodes to the same arrays, or the same error, through either path (checked on fuzzed
documents by tests/server/test_json_tensors.py and, on documents hypothesis writes, by
tests/server/test_json_tensors_differential.py).

Answers are written by the worker (server/dispatch/answer.py), in C the same way.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson


def _import_simdjson() -> Any:
    """pysimdjson, a dependency (pyproject.toml); None in an environment made before it was
    one: arrays are then read by orjson, as before, slower."""
    try:
        return importlib.import_module("simdjson")
    except ImportError:  # pragma: no cover - the tests run with it
        return None


simdjson: Final = _import_simdjson()

# Documents smaller than this are decoded by the reference reading alone: cutting would save
# microseconds, and small requests are most of them.
MIN_DOCUMENT_BYTES: Final = 16 * 1024
# Arrays smaller than this stay in the document (shapes, small inputs next to a big one).
MIN_ARRAY_BYTES: Final = 4 * 1024
# How deep a cut array may nest. An input's data sits 3 levels down the document (the
# document, `inputs`, the input), so a cut array never takes the document past the codec's
# depth limit (MAX_JSON_DEPTH, 72): the depth it checks on the rest is the document's.
MAX_NESTING: Final = 32
# How many closing brackets an array may have before finding its end costs more, in Python
# steps, than orjson's reading of it (data nested as [N, 2] with a large N): such an array
# stays in the document.
MAX_INNER_ARRAYS: Final = 4096
# The Python steps one document may take (see _Walk): a request has a few dozen strings.
MAX_WALK_STEPS: Final = 4 * MAX_INNER_ARRAYS
# simdjson parsers kept from one array to the next (see _take_parser), and the largest array
# one is kept after, in bytes and numbers (its text, and 16 bytes of tape per number, stay
# with it): a 1x3x224x224 tensor's text is about 3 MB, 150,528 numbers.
KEPT_PARSERS: Final = 4
KEPT_PARSER_BYTES: Final = 4 * 1024 * 1024
KEPT_PARSER_NUMBERS: Final = 256 * 1024
# Without a quote, a JSON array can hold numbers, arrays, true, false, null and empty objects;
# one with any of these bytes stays in the document, where the reference reading sees it.
# (Anything else that is not a number, NaN for one, is invalid JSON, which orjson refuses.)
_NOT_NUMBERS: Final = (b"t", b"f", b"n", b"{")
_FRACTION_OR_EXPONENT: Final = (b".", b"e", b"E")
_COLON: Final = re.compile(rb"[ \t\n\r]*:[ \t\n\r]*")
_DATA_KEY: Final = b'"data"'


class NotCut(Exception):
    """The request is not one this path reads exactly like the reference; the reference reads it."""


@dataclass(frozen=True, slots=True)
class Cut:
    """A JSON document with its large numeric `data` arrays taken out."""

    skeleton: bytes  # the document, each cut array replaced by a placeholder string
    arrays: dict[str, np.ndarray]  # placeholder -> the array it replaced, as numpy reads it


def cut(document: bytes) -> Cut:
    """Cuts every large numeric `data` array out of `document` and parses it into an array.

    Raises NotCut when there is none, or when one is not valid JSON (the reference reading
    reports that)."""
    # A fresh nonce per document: a client cannot write a string equal to a placeholder.
    nonce = os.urandom(8).hex()
    pieces: list[bytes] = []
    arrays: dict[str, np.ndarray] = {}
    copied = 0
    for start, end, nesting in _data_arrays(document):
        numbers = _parse(document, start, end, nesting)
        if numbers is None:
            continue
        placeholder = f"{nonce}:{len(arrays)}"
        arrays[placeholder] = numbers
        pieces += [document[copied:start], b'"', placeholder.encode(), b'"']
        copied = end
    if not arrays:
        raise NotCut
    pieces.append(document[copied:])
    return Cut(b"".join(pieces), arrays)


def put_back(doc: object, arrays: dict[str, np.ndarray]) -> None:
    """Puts each array in the parsed skeleton where its placeholder is: an input's `data`.

    Raises NotCut if any placeholder is elsewhere (a `data` key outside an input, a duplicate
    key that replaced it): the reference reading decides what such a document means."""
    left = dict(arrays)
    inputs = doc.get("inputs") if isinstance(doc, dict) else None
    for item in inputs if isinstance(inputs, list) else ():
        data = item.get("data") if isinstance(item, dict) else None
        if isinstance(data, str) and data in left:
            item["data"] = left.pop(data)
    if left:
        raise NotCut


# -- finding the arrays --------------------------------------------------------------------


def _data_arrays(document: bytes) -> Iterator[tuple[int, int, int]]:
    """(start, end, nesting) of each large array without strings that is a "data" key's value.

    Walks the document from string to string (bytes.find, in C): a quote outside a string
    opens one, and the array after a "data" key holds no quote, so it is found whole."""
    walk = _Walk(document)
    pos = 0
    while (quote := document.find(b'"', pos)) >= 0:
        close = walk.string_end(quote)
        if close < 0:
            return  # an unterminated string: the document is invalid, nothing to cut
        pos = close + 1
        if document[quote:pos] != _DATA_KEY:
            continue
        colon = _COLON.match(document, pos)
        if colon is None or document[colon.end() : colon.end() + 1] != b"[":
            continue
        start = colon.end()
        found = walk.array_end(start)
        if found is None:
            continue
        end, nesting = found
        pos = end
        if end - start >= MIN_ARRAY_BYTES:
            yield start, end, nesting


class _Walk:
    """The steps taken in Python over one document (a string, an escaped quote, a backslash
    before a quote, a closing bracket of nested data) are counted: past MAX_WALK_STEPS the
    document goes to the reference reading whole (NotCut), so that a document of many strings
    or escapes costs this path no more than a few milliseconds."""

    __slots__ = ("document", "steps")

    def __init__(self, document: bytes) -> None:
        self.document = document
        self.steps = MAX_WALK_STEPS

    def step(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise NotCut

    def string_end(self, quote: int) -> int:
        """Where the string opened at `quote` closes: the next quote not escaped (an odd run
        of backslashes before it escapes it); -1 if none."""
        document = self.document
        pos = quote + 1
        self.step()
        while (close := document.find(b'"', pos)) >= 0:
            backslashes = 0
            while document[close - 1 - backslashes] == 0x5C:
                backslashes += 1
                self.step()
            if backslashes % 2 == 0:
                return close
            pos = close + 1
        return -1

    def array_end(self, start: int) -> tuple[int, int] | None:
        """The end of the array opened at `start` (just past its closing bracket) and how deep
        it nests, if it holds no string (no quote before its end), nests at most MAX_NESTING
        deep and has at most MAX_INNER_ARRAYS arrays; None otherwise."""
        document = self.document
        limit = document.find(b'"', start)
        limit = len(document) if limit < 0 else limit
        first_close = document.find(b"]", start, limit)
        if first_close >= 0 and document.find(b"[", start + 1, first_close) < 0:
            return first_close + 1, 1  # flat, the usual case: found by two scans in C
        depth = deepest = 0
        pos = start
        for _ in range(MAX_INNER_ARRAYS):
            self.step()
            close = document.find(b"]", pos, limit)
            if close < 0:
                return None
            depth += document.count(b"[", pos, close)
            deepest = max(deepest, depth)
            if deepest > MAX_NESTING:
                return None
            depth -= 1
            pos = close + 1
            if depth == 0:
                return pos, deepest
        return None


# -- reading one array ---------------------------------------------------------------------


def _parse(document: bytes, start: int, end: int, nesting: int) -> np.ndarray | None:
    """The array numpy would make of the JSON array document[start:end]: float64 when any
    number has a fraction or an exponent (orjson reads those as floats), else as numpy finds;
    None if it may hold something that is not a number (it stays in the document)."""
    floats = any(document.find(mark, start, end) >= 0 for mark in _FRACTION_OR_EXPONENT)
    if nesting == 1:
        numbers = _straight(memoryview(document)[start:end], floats)
        if numbers is not None:
            # simdjson read numbers only (it refuses true, false, null and objects where a
            # number is asked for): the scans for them below, a pass over the text each, are
            # not needed.
            return numbers
    if any(document.find(byte, start, end) >= 0 for byte in _NOT_NUMBERS):
        return None
    try:
        values: Any = orjson.loads(memoryview(document)[start:end])
    except orjson.JSONDecodeError:
        raise NotCut from None
    try:
        if not floats:
            # NOTE: integers only; orjson reads those past 64 bits as floats, and numpy's own
            # discovery (int64, uint64, float64 or object) is the reference's.
            return np.asarray(values)
        if nesting == 1:
            return np.fromiter(values, np.float64, len(values))
        return np.array(values, np.float64)
    except (ValueError, OverflowError, TypeError):
        raise NotCut from None  # uneven nesting: the reference names the error


def _straight(array: memoryview, floats: bool) -> np.ndarray | None:
    """A flat JSON array of numbers parsed by simdjson straight into a buffer of float64
    (`floats`) or int64, without a Python object per number; None where simdjson refuses it
    (invalid JSON, a number out of its type's range: 1e400, an integer past int64, anything
    that is not a number), which the caller then hands to orjson, or leaves in the document,
    as before.

    NOTE: why this agrees with the reference. simdjson, orjson and Python's float() all round
    decimal text to the nearest double, so each number reads to the same bits (an integer in
    a float array converts exactly as numpy converts a Python int below 2**64; "-0" is the
    integer 0, "-0.0" the float -0.0, in both). It refuses what orjson refuses (NaN, Infinity,
    leading zeros, "+1", ".5", "1.", trailing commas). Nested arrays are not read here: simdjson
    flattens them, uneven ones included, which the reference refuses."""
    if simdjson is None:
        return None
    parser = _take_parser(len(array))
    try:
        buffer = parser.parse(array).as_buffer(of_type="d" if floats else "i")
    except (ValueError, TypeError, RuntimeError):
        # NUMBER_ERROR, BIGINT_ERROR (a RuntimeError), TAPE_ERROR, INCORRECT_TYPE... The
        # parser is not kept: the error's traceback may hold a proxy into its document.
        return None
    numbers = np.frombuffer(buffer, np.float64 if floats else np.int64)  # a copy: owns its data
    _keep_parser(parser, len(array), numbers.size)
    return numbers


def _take_parser(size: int) -> Any:
    """A kept parser for an array of `size` bytes if one is free, else a new one.

    NOTE: why keep parsers. A parser keeps its buffers (its copy of the text, the parsed tape)
    from one document to the next; made afresh for each array, the first touch of their pages
    cost more than the parse (9-12 ms against 3.4 ms of CPU for 150,528 numbers, measured).
    A parser holds one document at a time: each is used by one thread at once."""
    if size <= KEPT_PARSER_BYTES:
        with _KEPT_LOCK:
            if _KEPT:
                return _KEPT.pop()
    return simdjson.Parser()


def _keep_parser(parser: Any, size: int, numbers: int) -> None:
    """Keeps `parser` for the next array if it has read a small enough one (what it holds
    grows with the largest document it read: at most ~20 MB here) and fewer than
    KEPT_PARSERS are kept."""
    if size > KEPT_PARSER_BYTES or numbers > KEPT_PARSER_NUMBERS:
        return
    with _KEPT_LOCK:
        if len(_KEPT) < KEPT_PARSERS:
            _KEPT.append(parser)


_KEPT: Final[list[Any]] = []
_KEPT_LOCK: Final = threading.Lock()
