"""The README's promises: the CI runs its exact test command, and its code and settings tables are
the ones generated from the code (server/cli/doc_tables.py), so they never drift from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.cli import doc_tables
from server.services.limits import RateLimited
from server.v2.errors import InputShape
from validator import Code

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_starts_with_the_two_setup_commands() -> None:
    install_and_run, run_tests = _commands()
    assert install_and_run.endswith("graphgate serve")
    script = ROOT / run_tests.removeprefix("bash ")
    assert "pytest" in script.read_text()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _commands()[1] in ci


def test_the_readme_names_no_path_outside_the_repository() -> None:
    assert "../" not in README


def test_the_readme_tables_are_the_generated_ones() -> None:
    # On failure: python -m server.cli.doc_tables --write
    assert doc_tables.render(README) == README
    assert doc_tables.main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(doc_tables.TABLES))
def test_every_generated_table_has_its_place_in_the_readme(name: str) -> None:
    assert README.count(f"<!-- generated:{name} -->\n") == 1


def test_the_generated_tables_hold_what_the_code_defines() -> None:
    diagnostics = doc_tables.diagnostic_codes()
    assert all(f"| `{code}` | {code.meaning} |" in diagnostics for code in Code)
    services = doc_tables.service_error_codes()
    # A class from each module that declares errors, with its status from server/http/errors.py
    # and the gRPC status server/grpc/errors.py maps that to.
    assert f"| 429 | RESOURCE_EXHAUSTED | `{RateLimited.code}` |" in services
    assert (
        "| 400 | INVALID_ARGUMENT | `INPUT_SHAPE` | a shape that does not fit the input's fixed dims"
        in services
    )
    assert InputShape.code == "INPUT_SHAPE"
    assert "| 500 | INTERNAL | `INTERNAL` |" in services
    assert "| 405 | — | `METHOD_NOT_ALLOWED` |" in services  # no gRPC call meets it
    assert "| `GRAPHGATE_MAX_BATCH` | `32` |" in doc_tables.settings()


def test_a_readme_block_of_an_unknown_table_is_an_error() -> None:
    with pytest.raises(ValueError, match="README block 'nope'"):
        doc_tables.render("<!-- generated:nope -->\nold\n<!-- /generated -->\n")


def test_an_error_class_without_a_meaning_cannot_be_documented() -> None:
    class Undocumented(ValueError):
        code = "UNDOCUMENTED"

    assert doc_tables._own_meaning(Undocumented) is None
    with pytest.raises(ValueError, match="Undocumented: expected a docstring"):
        doc_tables._meaning(Undocumented)
