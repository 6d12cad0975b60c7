"""`graphgate check`: exit codes, compiler-style diagnostics, JSON report, no Paddle needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from graph_proto.builder import ProgramBuilder
from graph_proto.types import DType
from server.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def _model(tmp_path: Path, *, forbidden: bool = False) -> tuple[Path, Path]:
    b = ProgramBuilder()
    b.feed("x", DType.FP32, [-1, 3])
    b.param("w", np.ones(3, np.float32))
    b.var("y", DType.FP32, [-1, 3])
    b.op("elementwise_add", {"X": ["x"], "Y": ["w"]}, {"Out": ["y"]}, {"axis": -1})
    if forbidden:
        b.var("z", DType.FP32, [-1, 3])
        b.op("py_func", {"X": ["x"]}, {"Out": ["z"]}, {"forward_callable_id": 0})
    b.fetch("y")
    program, params = tmp_path / "model.pdmodel", tmp_path / "model.pdiparams"
    program.write_bytes(b.program_bytes())
    params.write_bytes(b.params_bytes() or b"")
    return program, params


def test_valid_program_exits_0_and_prints_the_signature(tmp_path: Path) -> None:
    program, _ = _model(tmp_path)
    result = CliRunner().invoke(app, ["check", str(program)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output
    assert "elementwise_add" in result.output
    assert "[-1, 3]" in result.output


def test_json_report_has_signature_histogram_params_and_cost(tmp_path: Path) -> None:
    program, params = _model(tmp_path)
    result = CliRunner().invoke(app, ["check", str(program), "--params", str(params), "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    report = body["report"]
    assert body["valid"] is True
    assert report["inputs"] == [{"name": "x", "dtype": "float32", "dims": [-1, 3]}]
    assert report["outputs"] == [{"name": "y", "dtype": "float32", "dims": [-1, 3]}]
    assert report["op_histogram"] == {"feed": 1, "elementwise_add": 1, "fetch": 1}
    assert report["params"] == {"count": 1, "bytes": 12}
    assert report["cost"]["batch"] == 32


def test_rejected_program_exits_1_with_compiler_style_lines(tmp_path: Path) -> None:
    program, _ = _model(tmp_path, forbidden=True)
    result = CliRunner().invoke(app, ["check", str(program)])
    assert result.exit_code == 1
    assert (
        f"{program}: block 0, op 2 (py_func): op 'py_func' touches files, network, devices or "
        "user code and is never allowed [OP_FORBIDDEN]"
    ) in result.output


def test_rejected_program_as_json_lists_every_diagnostic(tmp_path: Path) -> None:
    program, _ = _model(tmp_path, forbidden=True)
    result = CliRunner().invoke(app, ["check", str(program), "--json"])
    assert result.exit_code == 1
    body = json.loads(result.output)
    assert body["valid"] is False
    assert [d["code"] for d in body["diagnostics"]] == ["OP_FORBIDDEN"]
    assert body["diagnostics"][0]["op_index"] == 2


@pytest.mark.parametrize(
    "args",
    [[], ["check"], ["check", "missing.pdmodel"], ["check", "x.pdmodel", "--bogus"]],
    ids=["no-command", "no-file", "unreadable", "unknown-flag"],
)
def test_usage_and_io_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    result = CliRunner().invoke(
        app, [a if a != "missing.pdmodel" else str(tmp_path / a) for a in args]
    )
    assert result.exit_code == 2


def test_check_runs_without_paddle(tmp_path: Path) -> None:
    program, _ = _model(tmp_path)
    # `import paddle` fails in the child: a None entry in sys.modules blocks the import.
    code = (
        "import sys; sys.modules['paddle'] = None\n"
        "from server.cli.main import app\n"
        f"app(['check', {str(program)!r}, '--json'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["valid"] is True
