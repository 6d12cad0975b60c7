"""`graphgate upload / models / infer` against a real `graphgate serve` process on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner, Result

from executor import SessionOptions, compile
from graph_proto.types import DType
from server.cli.main import app as cli
from server.cli.user import HEADER_LENGTH, decode_infer_response, encode_infer_request
from server.dispatch.answer import AnswerSpec, Budget, BufferSink, OutputSpec, encode
from server.v2 import codec
from tests.support.api import post_tenant
from tests.support.backends import backend_environment
from tests.support.builders import GraphBuilder, V, mlp
from tests.support.served import ROOT, Server
from validator import TensorSpec, validate

MLP = mlp((8, 16, 4)).built()
X = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, backend: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Server, str]]:
    """A server with tenant `acme`; yields the server and acme's key."""
    env = backend_environment(backend, request)
    with Server(tmp_path_factory.mktemp("cli-user") / "data", env) as server:
        yield server, post_tenant(server, "acme")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("files")
    paths = {k: folder / f"mlp.{k}" for k in ("pdmodel", "pdiparams")}
    paths["pdmodel"].write_bytes(MLP.program)
    paths["pdiparams"].write_bytes(MLP.params or b"")
    paths["x"] = folder / "x.npy"
    np.save(paths["x"], X)
    return paths


def run(served: tuple[Server, str], *args: str, key: str | None = None) -> Result:
    server, tenant_key = served
    connection = ["--url", server.url, "--key", tenant_key if key is None else key]
    return CliRunner().invoke(cli, [*args, *connection])


def upload(served: tuple[Server, str], name: str, files: dict[str, Path]) -> Result:
    # Not tests/support/uploads.py's helpers: what this module tests is the `graphgate upload`
    # command, which reads the files from disk and posts them itself.
    return run(served, "upload", name, str(files["pdmodel"]), "--params", str(files["pdiparams"]))


def test_upload_list_and_infer_equal_the_local_executor(
    served: tuple[Server, str], files: dict[str, Path], tmp_path: Path
) -> None:
    first, second = upload(served, "mlp", files), upload(served, "mlp", files)
    assert first.exit_code == 0, first.output
    assert "uploaded 'mlp' version 1 (ready)" in first.output
    assert "input  x: float32[-1, 8]" in first.output
    assert "output probs: float32[-1, 4]" in first.output
    assert second.exit_code == 0 and "version 2" in second.output

    listed = run(served, "models", "--json")
    assert listed.exit_code == 0, listed.output
    (row,) = [m for m in json.loads(listed.stdout)["models"] if m["name"] == "mlp"]
    assert row["versions"] == [1, 2] and row["latest_version"] == 2
    table = run(served, "models")
    assert table.exit_code == 0 and "mlp" in table.output and "1, 2" in table.output

    want = compile(validate(MLP.program, MLP.params), SessionOptions(use_cuda=False)).run({"x": X})
    out = tmp_path / "out.npz"
    for version in ([], ["--version", "1"]):
        written = run(
            served, "infer", "mlp", "--input", f"x={files['x']}", *version, "-o", str(out)
        )
        assert written.exit_code == 0, written.output
        with np.load(out) as got:
            assert list(got) == ["probs"]
            assert got["probs"].dtype == np.float32
            assert got["probs"].tobytes() == want["probs"].tobytes()

    printed = run(served, "infer", "mlp", "-i", f"x={files['x']}")
    assert printed.exit_code == 0, printed.output
    assert printed.stdout.startswith("probs: float32[3, 4]  min ")
    assert f"max {want['probs'].max():.6g}" in printed.stdout


def test_rejected_upload_prints_every_diagnostic_and_exits_1(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    g = GraphBuilder()
    g.feed("x", DType.FP32, [-1, 4])
    g.node("no_such_op", {"X": ["x"]}, {"Out": [V("a", [-1, 4])]})
    g.node("other_op", {"X": ["a"]}, {"Out": [V("b", [-1, 4])]})
    g.fetch("b")
    program = tmp_path / "bad.pdmodel"
    program.write_bytes(g.program_bytes())

    result = run(served, "upload", "bad", str(program))
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("upload ")]
    assert f"{program}: block 0, op 1 (no_such_op): " in lines[0] and "[OP_UNKNOWN]" in lines[0]
    assert f"{program}: block 0, op 2 (other_op): " in lines[1] and "[OP_UNKNOWN]" in lines[1]
    assert lines[-1] == "error [VALIDATION_FAILED]: the program is rejected with 2 errors"
    assert "Traceback" not in result.output
    names = [m["name"] for m in json.loads(run(served, "models", "--json").stdout)["models"]]
    assert "bad" not in names


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["models"], "error [UNAUTHORIZED]: invalid or revoked API key"),
        (["infer", "m", "-i", "x=x.npy"], "error [UNAUTHORIZED]: invalid or revoked API key"),
    ],
)
def test_a_wrong_key_exits_2_with_the_server_code(
    served: tuple[Server, str], files: dict[str, Path], args: list[str], message: str
) -> None:
    args = [a.replace("x.npy", str(files["x"])) for a in args]
    result = run(served, *args, key="gg_wrong_key")
    assert result.exit_code == 2
    assert result.stderr.strip() == message


def test_server_errors_exit_2_with_code_and_message(
    served: tuple[Server, str], files: dict[str, Path], tmp_path: Path
) -> None:
    assert upload(served, "small", files).exit_code == 0
    unknown = run(served, "infer", "nope", "-i", f"x={files['x']}")
    assert (unknown.exit_code, unknown.stderr.strip()) == (2, "error [NOT_FOUND]: no model 'nope'")
    missing_version = run(served, "infer", "small", "--version", "9", "-i", f"x={files['x']}")
    assert missing_version.exit_code == 2
    assert missing_version.stderr.strip() == "error [NOT_FOUND]: model 'small' has no version 9"

    wide = tmp_path / "wide.npy"
    np.save(wide, np.zeros((2, 5), np.float32))
    shape = run(served, "infer", "small", "-i", f"x={wide}")
    assert shape.exit_code == 2
    assert (
        shape.stderr.strip() == "error [INPUT_SHAPE]: input 'x': expected shape [-1, 8], got [2, 5]"
    )

    doubles = tmp_path / "doubles.npy"
    np.save(doubles, X.astype(np.float64))
    dtype = run(served, "infer", "small", "-i", f"x={doubles}")
    assert dtype.exit_code == 2
    assert (
        dtype.stderr.strip()
        == "error [INPUT_DTYPE]: input 'x': expected datatype 'FP32', got 'FP64'"
    )

    bad_name = upload(served, "Bad Name", files)
    assert bad_name.exit_code == 2
    assert bad_name.stderr.splitlines()[-1] == (
        "error [INVALID_NAME]: model name must match ^[a-z0-9][a-z0-9_.-]{0,63}$, got 'Bad Name'"
    )
    assert "Traceback" not in bad_name.output


def test_usage_and_io_errors_exit_2(
    served: tuple[Server, str], files: dict[str, Path], tmp_path: Path
) -> None:
    cases = {
        ("infer", "m", "-i", "x"): "graphgate: expected --input NAME=FILE.npy, got 'x'",
        ("infer", "m", "-i", f"x={files['x']}", "-i", f"x={files['x']}"): (
            "graphgate: input 'x': expected once, got --input x=... twice"
        ),
        ("infer", "m", "-i", f"x={tmp_path / 'none.npy'}"): "graphgate: cannot read input 'x'",
        ("upload", "m", str(tmp_path / "none.pdmodel")): "graphgate: cannot read",
    }
    for args, message in cases.items():
        result = run(served, *args)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(message), result.stderr
    no_key = CliRunner().invoke(
        cli, ["models", "--url", served[0].url], env={"GRAPHGATE_API_KEY": ""}
    )
    assert no_key.exit_code == 2 and "an API key is needed" in no_key.stderr
    closed = CliRunner().invoke(cli, ["models", "--url", "http://127.0.0.1:9", "--key", "k"])
    assert closed.exit_code == 2 and closed.stderr.startswith("graphgate: cannot reach")


def test_url_and_key_from_the_environment_in_a_real_process(
    served: tuple[Server, str], files: dict[str, Path]
) -> None:
    """The installed command line reads GRAPHGATE_URL and GRAPHGATE_API_KEY."""
    server, key = served
    env = {**os.environ, "GRAPHGATE_URL": server.url, "GRAPHGATE_API_KEY": key}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "server.cli"]
    uploaded = subprocess.run(
        [*command, "upload", "envmodel", str(files["pdmodel"]), "--params", str(files["pdiparams"])],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert uploaded.returncode == 0, uploaded.stderr
    assert "uploaded 'envmodel' version 1" in uploaded.stdout
    assert "upload" in uploaded.stderr  # the progress bar goes to stderr
    listed = subprocess.run(
        [*command, "models", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert "envmodel" in [m["name"] for m in json.loads(listed.stdout)["models"]]


@pytest.mark.parametrize("binary", [True, False])
def test_responses_the_server_encodes_decode_to_the_same_arrays(binary: bool) -> None:
    """decode_infer_response reads what server/v2/codec.py writes, BF16 included (as float32)."""
    y = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    ids = np.array([[1, -(2**40)]], np.int64)
    halves = np.array([1.5, -2.0, 0.25], np.float32)  # exact in bfloat16
    bf16 = (halves.view(np.uint32) >> 16).astype(np.uint16)
    outputs = tuple(
        OutputSpec(name, codec.DATATYPES[dtype], dtype.numpy.str, binary, dtype == DType.BF16)
        for name, dtype in (("y", DType.FP32), ("ids", DType.INT64), ("h", DType.BF16))
    )
    sink = BufferSink()
    spec = AnswerSpec("m", "1", "r", outputs, Budget())
    _length, header = encode(spec, {"y": y, "ids": ids, "h": bf16}, sink, lambda: None)
    got = decode_infer_response(bytes(sink.buffer), None if header is None else str(header))
    assert list(got) == ["y", "ids", "h"]
    assert got["y"].dtype == np.float32 and got["y"].tobytes() == y.tobytes()
    np.testing.assert_array_equal(got["ids"], ids)
    assert got["ids"].dtype == np.int64
    assert got["h"].dtype == np.float32 and got["h"].tobytes() == halves.tobytes()


def test_a_request_the_cli_encodes_is_what_the_server_decodes() -> None:
    x, ids = X, np.array([3, -1, 2**40], np.int64)
    body, headers = encode_infer_request({"x": x, "ids": ids})
    inputs = [TensorSpec("x", DType.FP32, (-1, 8)), TensorSpec("ids", DType.INT64, (-1,))]
    outputs = [TensorSpec("y", DType.FP32, (-1, 8))]
    request = codec.decode_request(body, headers[HEADER_LENGTH], inputs, outputs)
    assert request.feeds["x"].tobytes() == x.tobytes()
    np.testing.assert_array_equal(request.feeds["ids"], ids)
    assert [(o.spec.name, o.binary) for o in request.outputs] == [("y", True)]
