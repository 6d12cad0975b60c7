"""`graphgate doctor` tells the truth: the device, and why CUDA is not used, in the words
`check`, `run` and `serve` say once per process; on a fresh machine what will be created where,
creating nothing; a failure only for what would really fail."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from server.cli.main import app
from tests.support.api import post_tenant
from tests.support.builders import affine, mlp
from tests.support.served import Server
from tests.support.uploads import post_model

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "device: "
SAID = "graphgate: running on "


def _doctor(*args: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """doctor in this process, with no GRAPHGATE_* variable but those of `env`."""
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("GRAPHGATE_")}
    result = CliRunner().invoke(app, ["doctor", *args], env={**unset, **(env or {})})
    return result.exit_code, result.output


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHGATE_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`graphgate ARGS` in its own process: what a user sees on stderr."""
    command = [sys.executable, "-m", "server.cli", *args]
    return subprocess.run(command, cwd=ROOT, env=_child_env(), capture_output=True, text=True)


def _device_line(output: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith(DEVICE)]
    return line.removeprefix(DEVICE)


def _said(stderr: str) -> list[str]:
    return [line.removeprefix(SAID) for line in stderr.splitlines() if line.startswith(SAID)]


def _driver_loads() -> bool:
    """Asked here, not of graphgate: is there an NVIDIA driver on this machine?"""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("model")
    built = affine()
    program = folder / "m.pdmodel"
    program.write_bytes(built.program_bytes())
    (folder / "m.pdiparams").write_bytes(built.params_bytes() or b"")
    np.save(folder / "x.npy", np.ones((2, 4), np.float32))
    return program, folder / "x.npy"


# -- stores -------------------------------------------------------------------------------------


def test_on_a_fresh_machine_doctor_says_what_will_be_created_and_creates_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "fresh" / "data"
    code, output = _doctor("--data-dir", str(data_dir))
    assert code == 0, output
    assert f"data directory {data_dir}: will be created (parent {tmp_path} writable)" in output
    assert f"database {data_dir / 'graphgate.db'}: will be created" in output
    assert f"artifact store {data_dir / 'artifacts'}: will be created" in output
    assert "NOT" not in output and "UNREACHABLE" not in output
    assert list(tmp_path.iterdir()) == []


def test_once_the_data_dir_is_made_doctor_finds_it_writable_and_the_database_reachable(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    env = {"GRAPHGATE_DATA_DIR": str(data_dir)}
    unset = {k: None for k in os.environ if k.startswith("GRAPHGATE_")}
    migrated = CliRunner().invoke(app, ["migrate"], env={**unset, **env})
    assert migrated.exit_code == 0, migrated.output
    code, output = _doctor(env=env)
    assert code == 0, output
    assert f"data directory {data_dir}: writable" in output
    assert f"database {data_dir / 'graphgate.db'}: reachable" in output


def test_a_data_dir_that_cannot_be_created_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    code, output = _doctor("--data-dir", str(blocker / "data"))
    assert code == 1
    assert (
        f"data directory {blocker / 'data'}: cannot be created ({blocker} is NOT a directory)"
        in output
    )
    assert not (blocker / "data").exists()


def test_a_configured_postgresql_that_does_not_answer_fails_without_its_password(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg://graphgate:s3cret@127.0.0.1:{port}/graphgate"
    code, output = _doctor(
        "--data-dir", str(tmp_path / "data"), env={"GRAPHGATE_DATABASE_URL": url}
    )
    assert code == 1
    assert (
        f"database postgresql+psycopg://graphgate:***@127.0.0.1:{port}/graphgate: UNREACHABLE"
        in output
    )
    assert "s3cret" not in output


def test_doctor_finds_this_backends_stores(tmp_path: Path, backend_env: dict[str, str]) -> None:
    """On PostgreSQL and S3 it asks them (and they answer); embedded, it creates nothing."""
    code, output = _doctor("--data-dir", str(tmp_path / "data"), env=backend_env)
    assert code == 0, output
    if "GRAPHGATE_DATABASE_URL" in backend_env:
        assert f"artifact store {backend_env['GRAPHGATE_ARTIFACTS_URL']}: reachable" in output
        assert ": reachable" in output.split("database ", 1)[1].splitlines()[0]
    assert not (tmp_path / "data").exists()


# -- the device ---------------------------------------------------------------------------------


def test_doctor_says_cpu_and_why_on_a_machine_without_a_driver() -> None:
    code, output = _doctor()
    assert code == 0, output
    device = _device_line(output)
    if _driver_loads():  # a GPU machine: CUDA, or CPU for another reason than the driver's absence
        assert device == "CUDA" or device.startswith("CPU (CUDA not used: "), device
        assert "no NVIDIA driver" not in device
        return
    assert device == "CPU (CUDA not used: no NVIDIA driver, libcuda.so.1 not found)"
    assert "execution providers used: CPUExecutionProvider\n" in output
    assert "  libcuda.so.1: missing (not found)" in output


def test_turned_off_cuda_is_the_reason_doctor_gives() -> None:
    code, output = _doctor(env={"GRAPHGATE_USE_CUDA": "false"})
    assert code == 0, output
    assert _device_line(output) == "CPU (CUDA not used: turned off by GRAPHGATE_USE_CUDA=false)"


def test_check_and_run_say_doctors_words_once(model_files: tuple[Path, Path]) -> None:
    """Each command once, in its own process; a process running both still once."""
    program, x = model_files
    device = _device_line(_cli("doctor").stdout)
    expected = [] if device == "CUDA" else [device]  # running on CUDA is said at INFO only
    check = _cli("check", str(program), "--json")
    run = _cli("run", str(program), "-i", f"x={x}")
    assert (check.returncode, run.returncode) == (0, 0), check.stderr + run.stderr
    assert _said(check.stderr) == expected
    assert _said(run.stderr) == expected
    both = (
        "from server.cli.main import app\n"
        f"for args in (['check', {str(program)!r}], ['run', {str(program)!r}, '-i', 'x={x}']):\n"
        "    try:\n"
        "        app(args)\n"
        "    except SystemExit as done:\n"
        "        assert done.code == 0, args\n"
    )
    together = subprocess.run(
        [sys.executable, "-c", both], cwd=ROOT, env=_child_env(), capture_output=True, text=True
    )
    assert together.returncode == 0, together.stderr
    assert _said(together.stderr) == expected
    for stderr in (check.stderr, run.stderr, together.stderr):
        assert "CUDA execution provider unavailable" not in stderr


def test_serve_says_it_once_however_many_models_its_workers_compile(tmp_path: Path) -> None:
    device = _device_line(_cli("doctor").stdout)
    expected = [] if device == "CUDA" else [device]
    server = Server(tmp_path / "data", log=tmp_path / "serve.log")
    server.start()
    try:
        key = post_tenant(server, "t")
        for built in (affine().built(), mlp().built()):  # each compiled in a worker
            assert post_model(server, key, built=built).status_code == 201
    finally:
        server.stop()
    log = (tmp_path / "serve.log").read_text()
    assert _said(log) == expected, log
    assert "CUDA execution provider unavailable" not in log
