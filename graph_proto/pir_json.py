"""Parses untrusted PIR program bytes (Paddle 3's `model.json`) into plain Python values.

Defensive in the same way as the protobuf parser: the size cap comes before anything else,
nesting depth and item count are measured on the raw text before `json.loads` builds anything,
duplicate keys, NaN/Infinity and numbers out of range are refused. Every failure is a
FormatError with a stable code, never a traceback.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from graph_proto.errors import FormatError

MAX_DEPTH: Final = 64  # a real program nests op -> regions -> blocks -> ops about 8 per level
MAX_ITEMS: Final = 5_000_000  # brackets, commas and colons: about 6 per value
MAX_NUMBER_DIGITS: Final = 40
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
# A string is consumed possessively and its closing quote is optional: an unterminated one
# runs to the end in one match (json.loads refuses it), where a backtracking pattern would
# retry from every quote inside it (quadratic on an unterminated run of escaped quotes).
_STRUCTURE: Final = re.compile(rb'"(?:[^"\\]++|\\.)*+"?|[\[\]{},:]', re.DOTALL)


def looks_like_pir(data: bytes) -> bool:
    """True when the bytes start like a JSON object: a ProgramDesc never does (0x7b would be
    field 15 with the deprecated group wire type, which ProgramDesc does not have)."""
    return data.lstrip(b" \t\r\n")[:1] == b"{"


def load_json(data: bytes, *, max_bytes: int) -> Any:
    """The JSON value in `data`, or FormatError; never parses over `max_bytes`."""
    if not data:
        raise FormatError("PROGRAM_EMPTY", "expected a PIR program, got 0 bytes")
    if len(data) > max_bytes:
        raise FormatError(
            "PROGRAM_TOO_LARGE", f"expected at most {max_bytes} bytes, got {len(data)}; not parsed"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(
            "PROGRAM_MALFORMED", f"expected UTF-8 JSON text, got invalid bytes at {e.start}"
        ) from None
    _check_nesting(data)
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except FormatError:
        raise
    except (ValueError, RecursionError) as e:
        raise FormatError(
            "PROGRAM_MALFORMED", f"expected a JSON document, got invalid JSON ({e})"
        ) from None


def _check_nesting(data: bytes) -> None:
    """Depth and item count from the raw text (strings skipped), before any object exists."""
    depth = 0
    for items, match in enumerate(_STRUCTURE.finditer(data), 1):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                raise FormatError(
                    "PROGRAM_TOO_COMPLEX",
                    f"expected JSON nested at most {MAX_DEPTH} deep, got deeper; not parsed",
                )
        elif token in (b"]", b"}"):
            depth -= 1
        if items > MAX_ITEMS:
            raise FormatError(
                "PROGRAM_TOO_COMPLEX",
                f"expected at most {MAX_ITEMS} JSON tokens, got more; not parsed",
            )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise FormatError(
                "PROGRAM_MALFORMED", f"expected unique keys in every JSON object, got {key!r} twice"
            )
        result[key] = value
    return result


def _no_constant(name: str) -> float:
    raise FormatError("PROGRAM_MALFORMED", f"expected a finite JSON number, got {name}")


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_DIGITS:
        raise FormatError(
            "PROGRAM_MALFORMED", f"expected an integer in int64 range, got {len(text)} digits"
        )
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise FormatError("PROGRAM_MALFORMED", f"expected an integer in int64 range, got {value}")
    return value


def _finite_float(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS:
        raise FormatError(
            "PROGRAM_MALFORMED", f"expected a float64 number, got {len(text)} characters"
        )
    value = float(text)
    if not math.isfinite(value):
        raise FormatError("PROGRAM_MALFORMED", f"expected a finite float64, got {text}")
    return value
