"""examples/: the committed files are sound, and the README walkthrough works against a real server.

The walkthrough runs for real: a `graphgate serve` process on loopback, the tenant created and
the models uploaded and run with the commands written in examples/README.md (parsed from it),
its curl requests sent by httpx with the same bytes, and its tritonclient snippet executed. Every
answer must equal Paddle's own output (expected_probs.npy) within float32 tolerance.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
from typer.testing import CliRunner

from executor import SessionOptions, compile
from graph_proto import framework_pb2 as pb
from server.cli.main import app as cli
from tests.support.api import auth
from tests.support.realservers import free_port
from tests.support.served import Server
from validator import validate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
README = (EXAMPLES / "README.md").read_text()
RTOL, ATOL = 1e-4, 1e-5
# model folder -> (feed, dtype, dims, output dims) as the README's table states them
SIGNATURES = {
    "image_classifier": ("image", "float32", [-1, 3, 32, 32], [-1, 10]),
    "text_classifier": ("ids", "int64", [-1, -1], [-1, 2]),
}
SERVED_NAMES = {"image_classifier": "image-classifier", "text_classifier": "text-classifier"}


def files(folder: str) -> tuple[bytes, bytes]:
    return (
        (EXAMPLES / folder / "model.pdmodel").read_bytes(),
        (EXAMPLES / folder / "model.pdiparams").read_bytes(),
    )


def sample(folder: str) -> np.ndarray:
    return np.load(EXAMPLES / folder / f"{SIGNATURES[folder][0]}.npy")


def expected(folder: str) -> np.ndarray:
    return np.load(EXAMPLES / folder / "expected_probs.npy")


def assert_paddle_output(got: np.ndarray, folder: str) -> None:
    want = expected(folder)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# -- the committed files -------------------------------------------------------------------


@pytest.mark.parametrize("folder", list(SIGNATURES))
def test_committed_model_validates_and_matches_paddle_locally(folder: str) -> None:
    feed, dtype, dims, out_dims = SIGNATURES[folder]
    for path in (EXAMPLES / folder).iterdir():
        assert path.stat().st_size < 1024 * 1024, path
    validated = validate(*files(folder))
    report = validated.report.to_json()
    assert report["inputs"] == [{"name": feed, "dtype": dtype, "dims": dims}]
    assert report["outputs"] == [{"name": "probs", "dtype": "float32", "dims": out_dims}]
    x = sample(folder)
    assert x.dtype == np.dtype(dtype) and x.shape[0] == 2
    got = compile(validated, SessionOptions(use_cuda=False)).run({feed: x})
    assert_paddle_output(got["probs"], folder)


def test_json_request_carries_the_sample_ids() -> None:
    doc = json.loads((EXAMPLES / "text_classifier" / "request.json").read_text())
    ids = sample("text_classifier")
    (entry,) = doc["inputs"]
    assert (entry["name"], entry["datatype"], entry["shape"]) == ("ids", "INT64", list(ids.shape))
    assert entry["data"] == ids.ravel().tolist()


def test_committed_programs_carry_no_source_paths() -> None:
    for folder in SIGNATURES:
        program = pb.ProgramDesc.FromString((EXAMPLES / folder / "model.pdmodel").read_bytes())
        names = {attr.name for block in program.blocks for op in block.ops for attr in op.attrs}
        assert "op_callstack" not in names, folder


# Paddle's float outputs, which another CPU's kernels (other SIMD widths, other summation
# orders) may compute a few ulps apart; every other file the script writes is exact.
COMPUTED_BY_PADDLE = {"expected_probs.npy"}


@pytest.mark.paddle
def test_make_examples_writes_the_committed_files(tmp_path: Path) -> None:
    """A rerun of the script (seeded) gives the same programs, weights and inputs byte for byte,
    and Paddle's outputs within the float32 tolerances."""
    subprocess.run(
        [sys.executable, str(EXAMPLES / "make_examples.py"), "--out", str(tmp_path)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    for folder in SIGNATURES:
        made = sorted(p.name for p in (tmp_path / folder).iterdir())
        assert made == sorted(p.name for p in (EXAMPLES / folder).iterdir())
        for name in made:
            ours, theirs = EXAMPLES / folder / name, tmp_path / folder / name
            if name in COMPUTED_BY_PADDLE:
                committed, rerun = np.load(ours), np.load(theirs)
                assert (committed.dtype, committed.shape) == (rerun.dtype, rerun.shape), name
                np.testing.assert_allclose(
                    rerun, committed, rtol=RTOL, atol=ATOL, err_msg=f"{folder}/{name}"
                )
            else:
                assert ours.read_bytes() == theirs.read_bytes(), f"{folder}/{name}"


# -- the README walkthrough ----------------------------------------------------------------


def readme_lines() -> list[str]:
    """Every line of the README's sh blocks, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", README, re.DOTALL)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]


def readme_commands(prefix: str) -> list[list[str]]:
    """Every command in the README's sh blocks that starts with `prefix`, split like a shell."""
    commands = []
    for line in readme_lines():
        words = shlex.split(line, comments=True)
        if words[: len(prefix.split())] == prefix.split():
            commands.append(words)
    return commands


def expanded_commands(tmp: Path) -> list[list[str]]:
    """The README's `graphgate` commands as bash expands them, its variable assignments (the
    `mktemp -d` folders, made under `tmp`) run first: `graphgate` is a function that prints
    its arguments, and nothing else the README says (pip, curl) runs."""
    assignment = re.compile(r"(export )?[A-Z_]+=")
    kept = [
        line for line in readme_lines() if line.startswith("graphgate ") or assignment.match(line)
    ]
    script = "\n".join(["graphgate() { printf 'graphgate'; printf '\\t%s' \"$@\"; echo; }", *kept])
    done = subprocess.run(
        ["bash", "-euc", script], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line.split("\t") for line in done.stdout.splitlines()]


WRITTEN = ("--data-dir", "-o", "--output")  # the options whose path a command writes


def test_the_walkthrough_writes_only_outside_the_checkout_in_a_fresh_data_dir(
    tmp_path: Path,
) -> None:
    written = [
        (option, Path(words[i + 1]))
        for words in expanded_commands(tmp_path)
        for i, option in enumerate(words)
        if option in WRITTEN
    ]
    assert sorted(option for option, _ in written) == ["--data-dir", "-o"]  # serve's, infer's
    for option, path in written:
        assert not (ROOT / path).resolve().is_relative_to(ROOT), (option, path)
        if option == "--data-dir":
            assert not path.exists()  # fresh: its first start prints the admin token


def start_as_the_readme_says(tmp: Path) -> tuple[Server, str]:
    """Step 1: the README's `graphgate serve` (its port aside), no admin token configured; the
    server and the admin token its first start printed."""
    (serve,) = [words for words in expanded_commands(tmp) if words[:2] == ["graphgate", "serve"]]
    server = Server(Path(serve[serve.index("--data-dir") + 1]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHGATE_")}
    server.env["GRAPHGATE_GRPC_PORT"] = str(free_port())  # the README's 8001, moved like --port
    ports = ["--port", str(server.port), "--grpc-port", server.env["GRAPHGATE_GRPC_PORT"]]
    log = tmp / "serve.log"
    with log.open("wb") as output:
        server.process = subprocess.Popen(
            [sys.executable, "-m", "server.cli", *serve[1:], *ports],
            cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, stdout=output, stderr=output,
        )  # fmt: skip
    live = is_live(server)
    printed = log.read_text()
    token = re.search(r"created the admin token \(shown once, store it now\):\n  (\S+)", printed)
    if not live or token is None:
        server.stop(signal.SIGKILL)
        raise AssertionError(f"{shlex.join(serve)}: no admin token, or not live:\n{printed}")
    return server, token.group(1)


def is_live(server: Server) -> bool:
    deadline = time.monotonic() + 90  # a wait, not a measure: a loaded CI box starts slowly
    while time.monotonic() < deadline and server.process and server.process.poll() is None:
        try:
            if httpx2.get(f"{server.url}/v2/health/live", timeout=1).status_code == 200:
                return True
        except httpx2.HTTPError:
            time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """Steps 1-3: serve, create the tenant and upload both models as the README does."""
    server, admin_token = start_as_the_readme_says(tmp_path_factory.mktemp("examples"))
    try:
        env = {"GRAPHGATE_URL": server.url, "GRAPHGATE_ADMIN_TOKEN": admin_token}
        (create,) = readme_commands("graphgate tenants create")
        created = CliRunner().invoke(cli, create[1:], env=env)
        assert created.exit_code == 0, created.output
        key = created.output.split()[-1]
        yield server, key
    finally:
        server.stop()


def grpc_url(server: Server) -> str:
    return f"grpc://127.0.0.1:{server.env['GRAPHGATE_GRPC_PORT']}"


def run_cli(walkthrough: tuple[Server, str], words: list[str]) -> Any:
    server, key = walkthrough
    env = {
        "GRAPHGATE_URL": server.url,
        "GRAPHGATE_API_KEY": key,
        "GRAPHGATE_GRPC_URL": grpc_url(server),
    }
    assert words[0] == "graphgate"
    return CliRunner().invoke(cli, words[1:], env=env)


@pytest.fixture(scope="module")
def uploaded(walkthrough: tuple[Server, str]) -> tuple[Server, str]:
    """The text model uploaded as the README's curl does, the image model with its CLI line."""
    server, key = walkthrough
    assert "-F name=text-classifier" in README
    program, params = files("text_classifier")
    response = httpx2.post(
        f"{server.url}/v1/models",
        data={"name": "text-classifier"},
        files={"program": ("model.pdmodel", program), "params": ("model.pdiparams", params)},
        headers=auth(key),
        timeout=120,
    )
    assert response.status_code == 201, response.text
    assert response.json()["version"] == 1
    (upload,) = readme_commands("graphgate upload")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)  # the README's paths are relative to the repository root
        result = run_cli(walkthrough, upload)
    assert result.exit_code == 0, result.output
    assert "uploaded 'image-classifier' version 1 (ready)" in result.stdout
    return walkthrough


def test_models_lists_both(uploaded: tuple[Server, str]) -> None:
    result = run_cli(uploaded, ["graphgate", "models", "--json"])
    assert result.exit_code == 0, result.output
    names = {m["name"]: m["versions"] for m in json.loads(result.stdout)["models"]}
    assert names == {"image-classifier": [1], "text-classifier": [1]}


def test_curl_json_request(uploaded: tuple[Server, str]) -> None:
    server, key = uploaded
    assert "-d @examples/text_classifier/request.json" in README
    assert "$GRAPHGATE_URL/v2/models/text-classifier/infer" in README
    response = httpx2.post(
        f"{server.url}/v2/models/text-classifier/infer",
        content=(EXAMPLES / "text_classifier" / "request.json").read_bytes(),
        headers={**auth(key), "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text
    doc = response.json()
    assert (doc["model_name"], doc["model_version"], doc["id"]) == (
        "text-classifier",
        "1",
        "example-1",
    )
    (out,) = doc["outputs"]
    assert (out["name"], out["datatype"]) == ("probs", "FP32")
    assert_paddle_output(
        np.asarray(out["data"], np.float32).reshape(out["shape"]), "text_classifier"
    )


def test_cli_infer_commands(uploaded: tuple[Server, str], tmp_path: Path) -> None:
    commands = [words for words in expanded_commands(tmp_path) if words[1] == "infer"]
    assert len(commands) == 3
    assert [words for words in commands if "--grpc" in words] == [commands[2]]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        for words in commands:
            folder = next(f for f, served in SERVED_NAMES.items() if words[2] == served)
            result = run_cli(uploaded, words)
            assert result.exit_code == 0, result.output
            written = Path(words[words.index("-o") + 1]) if "-o" in words else None
            if written is None:  # printed: ask for the same outputs in a file
                written = tmp_path / "printed.npz"
                result = run_cli(uploaded, [*words, "-o", str(written)])
                assert result.exit_code == 0, result.output
            with np.load(written) as got:
                assert_paddle_output(got["probs"], folder)


@pytest.mark.parametrize(
    ("client", "variable", "default"),
    [
        ("tritonclient.http", "GRAPHGATE_URL", "http://127.0.0.1:8000"),
        ("tritonclient.grpc", "GRAPHGATE_GRPC_URL", "grpc://127.0.0.1:8001"),
    ],
)
def test_tritonclient_snippet(
    uploaded: tuple[Server, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    client: str,
    variable: str,
    default: str,
) -> None:
    """Run as written, at the server the variable names (the address is nowhere else)."""
    server, key = uploaded
    snippets = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    assert len(snippets) == 2
    (snippet,) = [s for s in snippets if f"import {client} as " in s]
    assert snippet.count(default.partition("://")[2]) == 1
    assert f'os.environ.get("{variable}", "{default}")' in snippet
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(variable, server.url if client == "tritonclient.http" else grpc_url(server))
    monkeypatch.setenv("GRAPHGATE_API_KEY", key)
    namespace: dict[str, Any] = {}
    exec(snippet, namespace)
    assert_paddle_output(namespace["probs"], "image_classifier")
    assert capsys.readouterr().out.strip().endswith("True")
