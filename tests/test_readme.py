"""The README's promises: the CI runs its exact test command, and every diagnostic code is documented."""

from __future__ import annotations

from pathlib import Path

from validator import Code

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_starts_with_the_two_setup_commands() -> None:
    install_and_run, run_tests = _commands()
    assert install_and_run.endswith("graphgate serve")
    assert "pytest" in run_tests


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _commands()[1] in ci


def test_every_diagnostic_code_is_documented() -> None:
    missing = [str(code) for code in Code if f"| `{code}` |" not in README]
    assert missing == []


def _subclasses(kind: type) -> list[type]:
    return [kind, *(sub for direct in kind.__subclasses__() for sub in _subclasses(direct))]


def test_every_service_error_code_is_documented() -> None:
    # Imported here: the modules that define error classes register them as subclasses.
    import server.services.limits
    import server.v2.errors
    from executor.errors import ExecutionError
    from server import errors
    from server.services.types import ServiceError

    assert server.services.limits and server.v2.errors
    raised = _subclasses(ServiceError)[1:] + _subclasses(ExecutionError)
    codes = {kind.code for kind in raised} | set(errors._HTTP_CODES.values()) | {"INTERNAL"}
    section = README.split("## Service error codes", 1)[1].split("\n## ", 1)[0]
    missing = sorted(code for code in codes if f"| `{code}` |" not in section)
    assert missing == []
