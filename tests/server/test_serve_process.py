"""A real `graphgate serve` process on loopback: CLI admin, uploads, restart, SIGKILL mid-upload."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from typer.testing import CliRunner

from server.cli.main import app as cli
from server.storage.artifacts import TMP_PREFIX
from tests.support.api import ADMIN_TOKEN, auth
from tests.support.served import Server
from tests.support.uploads import AFFINE, post_model


@pytest.fixture
def server(tmp_path: Path, backend_env: dict[str, str]) -> Iterator[Server]:
    with Server(tmp_path / "data", backend_env) as s:
        yield s


def _tenant(server: Server, name: str) -> str:
    args = ["tenants", "create", name, "--url", server.url, "--admin-token", ADMIN_TOKEN]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return result.output.split()[-1]


def test_cli_tenants_and_restart_keep_everything(server: Server) -> None:
    key = _tenant(server, "acme")
    assert key.startswith("gg_")
    assert post_model(server, key).status_code == 201
    assert post_model(server, key).status_code == 201
    before = httpx2.get(f"{server.url}/v1/models/m", headers=auth(key)).json()
    onnx = httpx2.get(f"{server.url}/v1/models/m/versions/2/onnx", headers=auth(key)).content

    listed = CliRunner().invoke(
        cli, ["tenants", "list", "--url", server.url, "--admin-token", ADMIN_TOKEN]
    )
    assert listed.exit_code == 0 and "acme" in listed.output and "active" in listed.output

    server.stop()
    server.start()
    assert httpx2.get(f"{server.url}/v1/models/m", headers=auth(key)).json() == before
    again = httpx2.get(f"{server.url}/v1/models/m/versions/2/onnx", headers=auth(key))
    assert again.content == onnx

    key_id = key.split("_")[1]
    revoke = ["tenants", "revoke-key", key_id, "--url", server.url, "--admin-token", ADMIN_TOKEN]
    assert CliRunner().invoke(cli, revoke).exit_code == 0
    assert httpx2.get(f"{server.url}/v1/models", headers=auth(key)).status_code == 401


def test_cli_reports_server_errors(server: Server) -> None:
    args = ["tenants", "list", "--url", server.url, "--admin-token", ADMIN_TOKEN + "x"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert "UNAUTHORIZED" in result.output


@pytest.mark.embedded_only  # plants a temp file in the artifacts folder (an S3 PUT leaves none)
def test_sigkill_mid_upload_leaves_no_model_and_temp_files_are_swept(server: Server) -> None:
    key = _tenant(server, "acme")
    sent_half, release = threading.Event(), threading.Event()

    def body() -> Iterator[bytes]:
        yield b'--xx\r\nContent-Disposition: form-data; name="name"\r\n\r\nm\r\n'
        yield b'--xx\r\nContent-Disposition: form-data; name="program"; filename="p"\r\n\r\n'
        yield AFFINE.program[: len(AFFINE.program) // 2]
        sent_half.set()
        release.wait(30)
        yield AFFINE.program[len(AFFINE.program) // 2 :] + b"\r\n--xx--\r\n"

    def client() -> None:
        headers = {**auth(key), "Content-Type": "multipart/form-data; boundary=xx"}
        with contextlib.suppress(httpx2.HTTPError):
            httpx2.post(f"{server.url}/v1/models", content=body(), headers=headers, timeout=30)

    thread = threading.Thread(target=client)
    thread.start()
    assert sent_half.wait(30)
    time.sleep(0.3)
    # A crash between an artifact's write and its rename leaves a temp file like this one.
    shard = server.data_dir / "artifacts" / "00"
    shard.mkdir(parents=True, exist_ok=True)
    (shard / f"{TMP_PREFIX}interrupted").write_bytes(AFFINE.program[:10])
    server.stop(signal.SIGKILL)
    release.set()
    thread.join(30)

    server.start()
    assert httpx2.get(f"{server.url}/v1/models/m", headers=auth(key)).status_code == 404
    assert httpx2.get(f"{server.url}/v1/models", headers=auth(key)).json() == {"models": []}
    assert list((server.data_dir / "artifacts").glob(f"*/{TMP_PREFIX}*")) == []
    assert post_model(server, key).json()["version"] == 1
