"""Storage quotas and artifact garbage collection: after a delete, and orphans swept at start."""

from __future__ import annotations

import hashlib
import os
import time

import pytest
from fastapi.testclient import TestClient

from server.main import create_app
from server.settings import Settings
from server.storage import ArtifactStore, open_artifacts
from server.storage.artifacts import Artifacts
from tests.support.api import ADMIN_TOKEN, auth, new_tenant
from tests.support.backends import SettingsFactory
from tests.support.builders import affine
from tests.support.uploads import post_upload

SMALL = affine(4).built()
LARGE = affine(64).built()
OTHER = affine(5).built()  # about SMALL's size, other bytes


@pytest.fixture
def base(make_settings: SettingsFactory) -> Settings:
    """One data directory, database and artifact store that every restart in a test shares."""
    return make_settings()


def _settings(base: Settings, quota: int = 0, grace_s: int = 3600) -> Settings:
    changes = {"tenant_max_storage_bytes": quota, "artifact_gc_grace_s": grace_s}
    return base.model_copy(update=changes)


def _store(settings: Settings) -> ArtifactStore:
    return open_artifacts(settings.artifacts_url, settings.data_dir)


def _stored(settings: Settings) -> set[str]:
    return set(_store(settings).list())


def test_artifacts_of_a_deleted_model_are_deleted_and_shared_ones_kept(base: Settings) -> None:
    with TestClient(create_app(_settings(base))) as client:
        a, b = new_tenant(client, "a"), new_tenant(client, "b")
        assert post_upload(client, a, "m", SMALL).status_code == 201
        assert post_upload(client, b, "m", SMALL).status_code == 201  # the same bytes: shared files
        assert post_upload(client, a, "big", LARGE).status_code == 201
        both = _stored(base)
        big_program = hashlib.sha256(LARGE.program).hexdigest()
        assert big_program in both

        assert client.delete("/v1/models/big", headers=auth(a)).status_code == 204
        assert big_program not in _stored(base)
        assert client.delete("/v1/models/m", headers=auth(a)).status_code == 204
        # tenant b's version names the same files: they stay, and still serve
        small_program = hashlib.sha256(SMALL.program).hexdigest()
        assert small_program in _stored(base)
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
        assert client.post("/v2/models/m/infer", json=body, headers=auth(b)).status_code == 200
        assert client.delete("/v1/models/m", headers=auth(b)).status_code == 204
        assert _stored(base) == set()


def test_orphan_artifacts_are_swept_at_start(base: Settings) -> None:
    with TestClient(create_app(_settings(base))) as client:
        a = new_tenant(client, "a")
        assert post_upload(client, a, "m", SMALL).status_code == 201
        kept = _stored(base)
    # What an upload killed between writing its files and its database row leaves behind.
    sha = _store(base).put(b"bytes no version names")
    # Seconds old: it may be another replica's upload that has not committed its row yet.
    with TestClient(create_app(_settings(base))):
        assert _stored(base) == kept | {sha}
    # Older than the grace period (S3's LastModified cannot be backdated: the grace shrinks).
    with TestClient(create_app(_settings(base, grace_s=0))):
        assert _stored(base) == kept


@pytest.mark.embedded_only  # backdates a file's mtime (tests/server/test_backends.py: S3's age)
def test_storing_an_artifact_again_restarts_its_age(base: Settings) -> None:
    with TestClient(create_app(_settings(base))) as client:
        a = new_tenant(client, "a")
        assert post_upload(client, a, "m", SMALL).status_code == 201
        assert client.delete("/v1/models/m", headers=auth(a)).status_code == 204
    store = Artifacts(base.data_dir / "artifacts")
    sha = store.put(SMALL.program)  # an upload in flight, between its files and its row
    path = base.data_dir / "artifacts" / sha[:2] / sha
    os.utime(path, (time.time() - 7200, time.time() - 7200))
    assert dict(store.list_aged())[sha] > 7000
    store.put(SMALL.program)  # another upload of the same bytes
    assert dict(store.list_aged())[sha] < 60
    with TestClient(create_app(_settings(base))):
        assert sha in _stored(base)


def test_storage_quota_refuses_the_upload_that_crosses_it(base: Settings) -> None:
    with TestClient(create_app(_settings(base, quota=1))) as client:
        a = new_tenant(client, "acme")
        response = post_upload(client, a, "m", SMALL)
        assert response.status_code == 413
        assert response.json()["code"] == "STORAGE_QUOTA"
        assert "expected at most 1 stored bytes for tenant acme, got" in response.json()["error"]
        assert _stored(base) == set()  # nothing it stored stays
    with TestClient(create_app(_settings(base, quota=0))) as client:
        # the quota counts distinct artifacts: measure one upload, then allow exactly two
        created = client.post("/v1/admin/tenants", json={"name": "b"}, headers=auth(ADMIN_TOKEN))
        key = created.json()["key"]
        assert post_upload(client, key, "one", SMALL).status_code == 201
        one = sum(_store(base).size(sha) for sha in _stored(base))
    with TestClient(create_app(_settings(base, quota=one + one // 2))) as client:
        assert (
            post_upload(client, key, "again", SMALL).status_code == 201
        )  # the same bytes add nothing
        response = post_upload(client, key, "other", OTHER)
        assert response.status_code == 413, response.text
        assert response.json()["code"] == "STORAGE_QUOTA"
        assert client.delete("/v1/models/one", headers=auth(key)).status_code == 204
        assert client.delete("/v1/models/again", headers=auth(key)).status_code == 204
        assert (
            post_upload(client, key, "other", OTHER).status_code == 201
        )  # deleting freed the room
