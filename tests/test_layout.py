"""No module under tests/ or benchmarks/ imports a test module (a file named test_*.py): what
several of them share lives in tests/support/ or in a helper module of their package, so that
each test module can be read, run and changed on its own."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "benchmarks")


def _module_name(path: Path) -> str:
    """tests/server/test_x.py -> tests.server.test_x; a package's __init__.py -> the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(source: str, module: str, is_package: bool = False) -> Iterator[str]:
    """Every module the source of `module` imports, as dotted names: `from a import b` yields a
    and a.b (b may be a module); relative imports are resolved against its package."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _is_test_module(name: str) -> bool:
    return name.split(".")[0] in SCANNED and name.rsplit(".", 1)[-1].startswith("test_")


def _sources() -> Iterator[Path]:
    """The project's own .py files under SCANNED (not the caches under hidden folders, such as
    tests/.cache/ecosystem, which hold third-party packages)."""
    for folder in SCANNED:
        for top, folders, files in os.walk(ROOT / folder):
            folders[:] = sorted(f for f in folders if not f.startswith((".", "__pycache__")))
            yield from (Path(top) / name for name in sorted(files) if name.endswith(".py"))


def test_no_module_imports_a_test_module() -> None:
    found = []
    for path in _sources():
        module = _module_name(path)
        imported = _imported(path.read_text(), module, path.name == "__init__.py")
        found += [f"{module} imports {name}" for name in sorted(set(imported))]
    found = [line for line in found if _is_test_module(line.rsplit(" ", 1)[-1])]
    assert found == [], "expected no imports of test modules, got:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from tests.server.test_models_api import upload", "tests.server.test_models_api"),
        ("import tests.server.test_audit", "tests.server.test_audit"),
        ("from tests.server import test_audit as audit", "tests.server.test_audit"),
        ("from . import test_audit", "tests.server.test_audit"),
        ("from .test_audit import ADMIN", "tests.server.test_audit"),
        ("from ..validator.test_bad_input import ROWS", "tests.validator.test_bad_input"),
        ("def f():\n    from tests.ops import test_lowering", "tests.ops.test_lowering"),
    ],
)
def test_the_check_finds_each_way_of_importing_a_test_module(source: str, expected: str) -> None:
    # The check above passes on an empty list: this shows it would see such an import.
    names = set(_imported(source, "tests.server.sample"))
    assert {name for name in names if _is_test_module(name)} == {expected}
