"""An upload's bytes: hashed once as they stream in (server/http/upload_form.py), stored under
digests anyone can check with hashlib, and nothing left behind by a refused upload (embedded
SQLite and the artifacts folder: these tests look inside the data directory)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server.settings import Settings
from server.storage.artifacts import Artifacts
from server.storage.spool import Spool
from tests.support.api import auth
from tests.support.builders import Built, mlp
from tests.support.uploads import post_upload, upload

pytestmark = pytest.mark.embedded_only

MLP = mlp((16, 64, 8)).built()
BOUNDARY = "spool-test-boundary"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stored_files(settings: Settings) -> dict[str, bytes]:
    """Every file in the artifacts folder, by name (temporary files included)."""
    root = settings.data_dir / "artifacts"
    return {path.name: path.read_bytes() for path in root.glob("*/*") if path.is_file()}


def spool_files(settings: Settings) -> list[Path]:
    return [p for p in (settings.data_dir / "spool").iterdir() if p.is_file()]


def rows(settings: Settings, table: str) -> int:
    with sqlite3.connect(settings.data_dir / "graphgate.db") as db:
        count: int = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return count


def chunked_body(name: str, built: Built, piece: int) -> Iterator[bytes]:
    """The multipart body of an upload in `piece`-byte pieces (no Content-Length): the server
    sees it arrive in many chunks, each part split across several."""
    assert built.params is not None
    body = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="program"; filename="p"\r\n\r\n'
    ).encode() + built.program
    body += (
        f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="params"; filename="q"\r\n\r\n'
    ).encode() + built.params
    body += f"\r\n--{BOUNDARY}--\r\n".encode()
    for start in range(0, len(body), piece):
        yield body[start : start + piece]


def test_stored_artifacts_are_named_by_hashlib_digests_of_what_was_sent(
    client: TestClient, key_a: str, settings: Settings
) -> None:
    assert MLP.params is not None
    headers = {**auth(key_a), "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    answer = client.post("/v1/models", content=chunked_body("m", MLP, 997), headers=headers)
    assert answer.status_code == 201, answer.text

    version = client.get("/v1/models/m", headers=auth(key_a)).json()["versions"][0]["sha256"]
    assert version["program"] == sha256(MLP.program)
    assert version["params"] == sha256(MLP.params)
    onnx = client.get("/v1/models/m/versions/1/onnx", headers=auth(key_a)).content
    assert version["onnx"] == sha256(onnx)

    stored = stored_files(settings)
    assert set(stored) == {sha256(MLP.program), sha256(MLP.params), sha256(onnx)}
    assert all(sha256(data) == name for name, data in stored.items())
    assert stored[sha256(MLP.params)] == MLP.params
    assert spool_files(settings) == []  # the upload's spool files are gone once it answered


def test_an_upload_sent_whole_is_stored_as_one_sent_in_pieces(
    client: TestClient, key_a: str, settings: Settings
) -> None:
    assert MLP.params is not None
    upload(client, key_a, "m", MLP)
    version = client.get("/v1/models/m", headers=auth(key_a)).json()["versions"][0]["sha256"]
    assert (version["program"], version["params"]) == (sha256(MLP.program), sha256(MLP.params))
    assert spool_files(settings) == []


def _truncated_params() -> Built:
    assert MLP.params is not None
    return Built(MLP.program, MLP.params[:-4])


def _garbage_program() -> Built:
    return Built(b"\x0a\xff\xff\xff not a ProgramDesc", MLP.params)


@pytest.mark.parametrize(
    "refused", [_truncated_params(), _garbage_program()], ids=["bad-params-size", "bad-program"]
)
def test_a_refused_upload_stores_nothing(
    client: TestClient, key_a: str, settings: Settings, refused: Built
) -> None:
    answer = post_upload(client, key_a, "m", refused)
    assert 400 <= answer.status_code < 500, answer.text
    assert stored_files(settings) == {}
    assert (rows(settings, "models"), rows(settings, "model_versions")) == (0, 0)
    assert rows(settings, "artifact_refs") == 0
    assert spool_files(settings) == []


def test_a_refused_upload_leaves_a_stored_model_sharing_its_program_whole(
    client: TestClient, key_a: str, settings: Settings
) -> None:
    upload(client, key_a, "kept", MLP)
    before = stored_files(settings)

    answer = post_upload(client, key_a, "refused", _truncated_params())

    assert 400 <= answer.status_code < 500, answer.text
    assert stored_files(settings) == before  # the shared program artifact stays
    assert [m["name"] for m in client.get("/v1/models", headers=auth(key_a)).json()["models"]] == [
        "kept"
    ]
    onnx = client.get("/v1/models/kept/versions/1/onnx", headers=auth(key_a))
    assert onnx.status_code == 200


def test_a_spool_file_is_hashed_as_written_and_stored_under_that_digest(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4099  # not a multiple of any piece below
    writer = Spool(tmp_path / "spool").writer()
    for start in range(0, len(data), 4096):
        writer.write(data[start : start + 4096])
    spooled = writer.finish()
    assert (spooled.size, spooled.sha256) == (len(data), sha256(data))

    store = Artifacts(tmp_path / "artifacts")
    assert store.put_file(spooled.path, spooled.sha256) == sha256(data)
    spooled.discard()  # the stored artifact does not depend on the spool file
    assert store.get(sha256(data)) == data
    assert list(store.list()) == [sha256(data)]
