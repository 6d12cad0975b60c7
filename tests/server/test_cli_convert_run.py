"""`graphgate convert` and `graphgate run`: offline conversion and execution without Paddle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from typer.testing import CliRunner

from server.cli.main import app
from tests.support.builders import affine


def _files(tmp_path: Path) -> tuple[Path, Path]:
    g = affine()
    program, params = tmp_path / "m.pdmodel", tmp_path / "m.pdiparams"
    program.write_bytes(g.program_bytes())
    params.write_bytes(g.params_bytes() or b"")
    return program, params


def _expected(params: Path, x: np.ndarray) -> np.ndarray:
    from graph_proto.pdiparams import array, read_params

    data = params.read_bytes()
    bias, scale = (array(data, t) for t in read_params(data))  # sorted names: bias, scale
    return x * scale + bias


def test_convert_writes_an_onnx_model_that_computes_the_program(tmp_path: Path) -> None:
    program, params = _files(tmp_path)
    out = tmp_path / "m.onnx"
    result = CliRunner().invoke(app, ["convert", str(program), "-o", str(out)])
    assert result.exit_code == 0, result.output
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["x"]
    assert [o.name for o in model.graph.output] == ["y"]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = ort.InferenceSession(out.read_bytes(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    np.testing.assert_allclose(y, _expected(params, x), rtol=1e-6)


def test_run_writes_the_outputs_to_an_npz(tmp_path: Path) -> None:
    program, params = _files(tmp_path)
    x = np.ones((3, 4), np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    result = CliRunner().invoke(
        app, ["run", str(program), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["y"], _expected(params, x), rtol=1e-6)


def test_run_prints_the_outputs(tmp_path: Path) -> None:
    program, _ = _files(tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float32))
    result = CliRunner().invoke(app, ["run", str(program), "-i", f"x={tmp_path / 'x.npy'}"])
    assert result.exit_code == 0, result.output
    assert "y: float32[1, 4]" in result.output


def test_run_with_a_wrong_input_name_is_a_typed_rejection(tmp_path: Path) -> None:
    program, _ = _files(tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float32))
    result = CliRunner().invoke(app, ["run", str(program), "-i", f"image={tmp_path / 'x.npy'}"])
    assert result.exit_code == 1
    assert (
        f"{program}: expected inputs ['x'], got ['image']: missing ['x'] [INPUT_MISSING]"
        in result.output
    )


def test_run_refuses_pickled_npy_and_bad_input_specs(tmp_path: Path) -> None:
    program, _ = _files(tmp_path)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    pickled = CliRunner().invoke(app, ["run", str(program), "-i", f"x={tmp_path / 'obj.npy'}"])
    malformed = CliRunner().invoke(app, ["run", str(program), "-i", "x"])
    assert (pickled.exit_code, malformed.exit_code) == (2, 2)
    assert "cannot read input 'x'" in pickled.output
    assert "expected --input NAME=FILE.npy, got 'x'" in malformed.output
