"""Storage quotas and artifact garbage collection: after a delete, and orphans swept at start."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from fastapi.testclient import TestClient
from pydantic import SecretStr

from server.main import create_app
from server.settings import Settings
from server.storage.artifacts import Artifacts
from tests.builders import Built, affine
from tests.server.conftest import ADMIN_TOKEN, auth, new_tenant

SMALL = affine(4).built()
LARGE = affine(64).built()
OTHER = affine(5).built()  # about SMALL's size, other bytes


def _settings(tmp_path: Path, quota: int = 0, grace_s: int = 3600) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        admin_token=SecretStr(ADMIN_TOKEN),
        tenant_max_storage_bytes=quota,
        artifact_gc_grace_s=grace_s,
    )


def _upload(client: TestClient, key: str, name: str, built: Built) -> int:
    files = {"program": built.program, "params": built.params or b""}
    response = client.post("/v1/models", data={"name": name}, files=files, headers=auth(key))
    return response.status_code if response.status_code != 201 else 201


def _stored(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "data" / "artifacts").glob("*/*") if len(p.name) == 64}


def test_artifacts_of_a_deleted_model_are_deleted_and_shared_ones_kept(tmp_path: Path) -> None:
    with TestClient(create_app(_settings(tmp_path))) as client:
        a, b = new_tenant(client, "a"), new_tenant(client, "b")
        assert _upload(client, a, "m", SMALL) == 201
        assert _upload(client, b, "m", SMALL) == 201  # the same bytes: shared files
        assert _upload(client, a, "big", LARGE) == 201
        both = _stored(tmp_path)
        big_program = hashlib.sha256(LARGE.program).hexdigest()
        assert big_program in both

        assert client.delete("/v1/models/big", headers=auth(a)).status_code == 204
        assert big_program not in _stored(tmp_path)
        assert client.delete("/v1/models/m", headers=auth(a)).status_code == 204
        # tenant b's version names the same files: they stay, and still serve
        small_program = hashlib.sha256(SMALL.program).hexdigest()
        assert small_program in _stored(tmp_path)
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
        assert client.post("/v2/models/m/infer", json=body, headers=auth(b)).status_code == 200
        assert client.delete("/v1/models/m", headers=auth(b)).status_code == 204
        assert _stored(tmp_path) == set()


def test_orphan_artifacts_are_swept_at_start(tmp_path: Path) -> None:
    with TestClient(create_app(_settings(tmp_path))) as client:
        a = new_tenant(client, "a")
        assert _upload(client, a, "m", SMALL) == 201
        kept = _stored(tmp_path)
    # What an upload killed between writing its files and its database row leaves behind.
    orphan = b"bytes no version names"
    sha = hashlib.sha256(orphan).hexdigest()
    shard = tmp_path / "data" / "artifacts" / sha[:2]
    shard.mkdir(exist_ok=True)
    (shard / sha).write_bytes(orphan)
    # Seconds old: it may be another replica's upload that has not committed its row yet.
    with TestClient(create_app(_settings(tmp_path))):
        assert _stored(tmp_path) == kept | {sha}
    two_hours_ago = time.time() - 7200
    os.utime(shard / sha, (two_hours_ago, two_hours_ago))
    with TestClient(create_app(_settings(tmp_path))):
        assert _stored(tmp_path) == kept


def test_storing_an_artifact_again_restarts_its_age(tmp_path: Path) -> None:
    with TestClient(create_app(_settings(tmp_path))) as client:
        a = new_tenant(client, "a")
        assert _upload(client, a, "m", SMALL) == 201
        assert client.delete("/v1/models/m", headers=auth(a)).status_code == 204
    store = Artifacts(tmp_path / "data" / "artifacts")
    sha = store.put(SMALL.program)  # an upload in flight, between its files and its row
    path = tmp_path / "data" / "artifacts" / sha[:2] / sha
    os.utime(path, (time.time() - 7200, time.time() - 7200))
    assert dict(store.list_aged())[sha] > 7000
    store.put(SMALL.program)  # another upload of the same bytes
    assert dict(store.list_aged())[sha] < 60
    with TestClient(create_app(_settings(tmp_path))):
        assert sha in _stored(tmp_path)


def test_storage_quota_refuses_the_upload_that_crosses_it(tmp_path: Path) -> None:
    with TestClient(create_app(_settings(tmp_path, quota=1))) as client:
        a = new_tenant(client, "acme")
        files = {"program": SMALL.program, "params": SMALL.params or b""}
        response = client.post("/v1/models", data={"name": "m"}, files=files, headers=auth(a))
        assert response.status_code == 413
        assert response.json()["code"] == "STORAGE_QUOTA"
        assert "expected at most 1 stored bytes for tenant acme, got" in response.json()["error"]
        assert _stored(tmp_path) == set()  # nothing it stored stays
    with TestClient(create_app(_settings(tmp_path, quota=0))) as client:
        # the quota counts distinct artifacts: measure one upload, then allow exactly two
        created = client.post("/v1/admin/tenants", json={"name": "b"}, headers=auth(ADMIN_TOKEN))
        key = created.json()["key"]
        assert _upload(client, key, "one", SMALL) == 201
        one = sum(p.stat().st_size for p in (tmp_path / "data" / "artifacts").glob("*/*"))
    with TestClient(create_app(_settings(tmp_path, quota=one + one // 2))) as client:
        assert _upload(client, key, "again", SMALL) == 201  # the same bytes add nothing
        response = client.post(
            "/v1/models",
            data={"name": "other"},
            files={"program": OTHER.program, "params": OTHER.params or b""},
            headers=auth(key),
        )
        assert response.status_code == 413, response.text
        assert response.json()["code"] == "STORAGE_QUOTA"
        assert client.delete("/v1/models/one", headers=auth(key)).status_code == 204
        assert client.delete("/v1/models/again", headers=auth(key)).status_code == 204
        assert _upload(client, key, "other", OTHER) == 201  # deleting freed the room
