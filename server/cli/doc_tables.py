"""The README's code and settings tables, generated from the code that defines them.

    python -m server.cli.doc_tables --write   # rewrites the tables in README.md
    python -m server.cli.doc_tables --check   # exit 1 when README.md differs (tests/test_readme.py)

Each table sits between `<!-- generated:NAME -->` and `<!-- /generated -->`; the text between the
markers is replaced, everything else in the README is left as written. The sources: validator's
`Code` (diagnostic codes), the error classes that reach HTTP with server/http/errors.py's status table
(service error codes, throttling codes) and the `Settings` fields' descriptions (settings).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from pydantic_core import PydanticUndefined

from server.console import sessions as console_sessions
from server.errors import ServiceError, TooManyRequests
from server.grpc import errors as grpc_errors
from server.http import errors
from server.http import limits as http_limits
from server.services import limits
from server.settings import Settings
from server.v2 import errors as v2_errors
from validator import Code

E = TypeVar("E", bound=Exception)
README: Final = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK: Final = re.compile(
    r"(<!-- generated:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S
)
# Imported for what they declare: their error classes are subclasses found by the walk below.
_ERROR_MODULES: Final = (limits, v2_errors, console_sessions)
# HTTP statuses of codes no gRPC call can meet: a route, a method, a media type, the request line
# and the HTTP read timeouts.
HTTP_ONLY: Final = frozenset({405, 408, 414, 415})


@dataclass(frozen=True, slots=True)
class ErrorDoc:
    status: int
    code: str
    meaning: str


def diagnostic_codes() -> str:
    rows = [f"| `{code}` | {code.meaning} |" for code in Code]
    return _table(("code", "meaning"), rows)


def service_error_codes() -> str:
    rows = [
        f"| {e.status} | {_grpc_status(e.status)} | `{e.code}` | {e.meaning} |"
        for e in documented_errors()
    ]
    return _table(("status", "gRPC", "code", "meaning"), rows)


def _grpc_status(http_status: int) -> str:
    """The gRPC status a code is answered with (server/grpc/errors.py), or "—" for a code
    only HTTP has (a route, a method, a request line)."""
    status = grpc_errors.GRPC_STATUS.get(http_status)
    return "—" if status is None or http_status in HTTP_ONLY else status.name


def throttling_codes() -> str:
    throttled = [kind for kind in _subclasses(TooManyRequests) if kind is not TooManyRequests]
    rows = [f"| `{kind.code}` | {_meaning(kind)} |" for kind in throttled]
    return _table(("error code", "meaning"), rows)


def settings() -> str:
    rows = []
    for name, field in Settings.model_fields.items():
        if not field.description:
            raise ValueError(f"Settings.{name}: expected a description, got none")
        env = f"GRAPHGATE_{name.upper()}"
        rows.append(f"| `{env}` | {_default(field.default)} | {field.description} |")
    return _table(("setting", "default", "the most it allows, or what it sets"), rows)


TABLES: Final[Mapping[str, Callable[[], str]]] = {
    "diagnostic-codes": diagnostic_codes,
    "service-error-codes": service_error_codes,
    "throttling-codes": throttling_codes,
    "settings": settings,
}


def documented_errors() -> list[ErrorDoc]:
    """One row per code that can reach HTTP, by status; within one, in declaration order."""
    found: dict[str, ErrorDoc] = {}
    for status, (code, meaning) in errors.HTTP_CODES.items():
        found[code] = ErrorDoc(status, code, meaning)
    for kind in _error_classes():
        code = str(getattr(kind, "code", ""))
        if code and code not in found:
            found[code] = ErrorDoc(errors.status_of(kind), code, _meaning_of_code(code))
    for code, (status, meaning) in http_limits.CODES.items():  # answered before the app
        found[code] = ErrorDoc(status, code, meaning)
    found[errors.INTERNAL[0]] = ErrorDoc(500, *errors.INTERNAL)
    order = list(found)
    return sorted(found.values(), key=lambda e: (e.status, order.index(e.code)))


def render(readme: str) -> str:
    """`readme` with every generated block rewritten; an unknown block name is an error."""

    def block(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in TABLES:
            raise ValueError(f"README block {name!r}: expected one of {sorted(TABLES)}")
        return f"{match[1]}{TABLES[name]()}{match[4]}"

    return _BLOCK.sub(block, readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.cli.doc_tables", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the README's tables")
    mode.add_argument("--check", action="store_true", help="exit 1 when the README differs")
    args = parser.parse_args(argv)
    current = README.read_text()
    wanted = render(current)
    if args.write:
        README.write_text(wanted)
        return 0
    if wanted != current:
        sys.stderr.write("README.md tables differ: run python -m server.cli.doc_tables --write\n")
        return 1
    return 0


# -- helpers ---------------------------------------------------------------------------------


def _error_classes() -> Iterator[type[Exception]]:
    """Every class server/http/errors.py maps, with its subclasses, each once, bases first."""
    seen: set[type[Exception]] = set()
    for base, _status in errors.STATUS:
        for kind in _subclasses(base):
            if kind not in seen and kind is not ServiceError:
                seen.add(kind)
                yield kind


def _subclasses(kind: type[E]) -> list[type[E]]:
    # By module and name, not __subclasses__()'s order: that is import order, which differs
    # between `--write` and a test run, and the tables must not.
    direct = sorted(kind.__subclasses__(), key=lambda sub: (sub.__module__, sub.__qualname__))
    return [kind, *(sub for child in direct for sub in _subclasses(child))]


def _meaning_of_code(code: str) -> str:
    """The meaning of the first class with this code that states one."""
    kinds = [kind for kind in _error_classes() if getattr(kind, "code", None) == code]
    for kind in kinds:
        if (meaning := _own_meaning(kind)) is not None:
            return meaning
    raise ValueError(
        f"error code {code}: expected a docstring on {kinds[0].__qualname__} "
        "(or an entry in server.http.errors.MEANINGS), got none"
    )


def _meaning(kind: type[Exception]) -> str:
    meaning = _own_meaning(kind)
    if meaning is None:
        raise ValueError(f"{kind.__qualname__}: expected a docstring, got none")
    return meaning


def _own_meaning(kind: type[Exception]) -> str | None:
    """The first paragraph of the class's own docstring as a table cell: one line, starting
    lower case (unless it starts with an acronym), no final period."""
    if kind in errors.MEANINGS:
        return errors.MEANINGS[kind]
    doc = kind.__dict__.get("__doc__")
    if not doc:
        return None
    text = " ".join(doc.strip().split("\n\n")[0].split()).rstrip(".")
    first_word = text.split(" ", 1)[0]
    if first_word[1:].islower() or len(first_word) == 1:
        text = text[0].lower() + text[1:]
    return text


def _default(value: object) -> str:
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Path):
        return f"`{value}`"
    return f"`{value}`"


def _table(header: tuple[str, ...], rows: list[str]) -> str:
    lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}", *rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
