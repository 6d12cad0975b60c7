"""The scale-out backends with the real servers: PostgreSQL migrations under an advisory lock,
S3 faults (the store down before or during an upload: 503 STORAGE_UNAVAILABLE, nothing visible,
recovery), Redis-shared limits and cache invalidation between apps that share PostgreSQL, S3
and Redis (replicas in-process).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import text

from server.db.engine import create
from server.main import create_app
from server.services.limits import TooManyConcurrent
from server.services.limits_redis import RedisConcurrencyLimiter, RedisRateLimiter
from server.settings import Settings
from server.storage.s3 import S3Artifacts
from tests.support import realservers
from tests.support.api import ADMIN_TOKEN, auth, new_tenant
from tests.support.builders import affine
from tests.support.uploads import post_upload, upload

X = np.arange(8, dtype=np.float32).reshape(2, 4)
Servers = tuple[realservers.Server, realservers.Server]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[realservers.Server]:
    with realservers.scratch() as root:
        server = realservers.start_redis(root / "redis")
        try:
            yield server
        finally:
            server.stop()


class Replicas(Protocol):
    def __call__(self, count: int = 2, **extra: object) -> list[TestClient]: ...


@pytest.fixture
def replicas(
    postgres_s3: Servers,
    migrated_template: str,
    redis_server: realservers.Server,
    tmp_path: Path,
) -> Iterator[Replicas]:
    """Starts `count` apps that share one fresh database, bucket prefix and Redis (settings
    `extra` on top), each with its own data directory and caches, like separate processes;
    they stop at the end of the test."""
    with ExitStack() as stack:

        def start(count: int = 2, **extra: object) -> list[TestClient]:
            shared = Settings(
                admin_token=SecretStr(ADMIN_TOKEN),
                database_url=SecretStr(
                    realservers.new_database(postgres_s3[0], template=migrated_template)
                ),
                artifacts_url=f"s3://{realservers.S3_BUCKET}/{uuid.uuid4().hex}",
                redis_url=SecretStr(f"redis://{realservers.LOOPBACK}:{redis_server.port}/0"),
                **extra,  # type: ignore[arg-type]
            )
            return [
                stack.enter_context(
                    TestClient(create_app(shared.model_copy(update={"data_dir": data_dir})))
                )
                for data_dir in (tmp_path / f"replica-{i}" for i in range(count))
            ]

        yield start


def infer(client: TestClient, key: str, name: str = "m") -> np.ndarray:
    body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": X.ravel().tolist()}]
    }
    response = client.post(f"/v2/models/{name}/infer", json=body, headers=auth(key))
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["outputs"][0]["data"], dtype=np.float32)


# -- PostgreSQL ------------------------------------------------------------------------------


def test_concurrent_migrate_commands_take_turns_on_postgres(postgres_s3: Servers) -> None:
    # Separate processes, like replicas starting together (alembic's context is per process).
    url = realservers.new_database(postgres_s3[0])
    env = {**os.environ, "GRAPHGATE_DATABASE_URL": url}
    command = [sys.executable, "-m", "server.cli", "migrate"]
    runs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(4)
    ]
    outputs = [run.communicate(timeout=120)[0].decode() for run in runs]
    assert [run.returncode for run in runs] == [0] * 4, outputs
    with create(url).connect() as connection:
        versions = connection.execute(text("SELECT version_num FROM alembic_version")).all()
        tables = connection.execute(
            text("SELECT count(*) FROM information_schema.tables WHERE table_name = 'tenants'")
        ).scalar()
    assert len(versions) == 1 and tables == 1


# -- S3 faults ---------------------------------------------------------------------------------


@pytest.fixture
def own_s3(postgres_s3: Servers) -> Iterator[realservers.Server]:
    """A SeaweedFS of this test's own, which it may stop and restart (same port, same data)."""
    with realservers.scratch() as root:
        server = realservers.start_seaweedfs(root / "s3")
        try:
            yield server
        finally:
            server.stop()


def test_concurrent_uploads_of_one_name_on_two_replicas_get_distinct_versions(
    replicas: Replicas,
) -> None:
    built = affine().built()  # the same bytes each time: the artifact references race too
    one, two = replicas(2)
    key = new_tenant(one, "tenant-a")
    start = threading.Barrier(6)

    def post(client: TestClient) -> tuple[int, object]:
        start.wait(10)
        response = post_upload(client, key, built=built)
        return response.status_code, response.json().get("version", response.text)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(post, [one, two] * 3))
    assert [status for status, _ in answers] == [201] * 6, answers
    assert sorted(version for _, version in answers) == [1, 2, 3, 4, 5, 6]  # type: ignore[type-var]

    # every version counted its references: the bytes stay until the last one goes
    program = hashlib.sha256(built.program).hexdigest()
    shared: Settings = one.app.state.settings  # type: ignore[attr-defined]
    store = S3Artifacts.from_url(str(shared.artifacts_url))
    for version in range(1, 6):
        url = f"/v1/models/m/versions/{version}"
        assert (one, two)[version % 2].delete(url, headers=auth(key)).status_code == 204
    assert program in set(store.list())
    assert two.delete("/v1/models/m/versions/6", headers=auth(key)).status_code == 204
    assert program not in set(store.list())


def test_start_up_sweep_on_s3_spares_young_orphans(postgres_s3: Servers, tmp_path: Path) -> None:
    postgres, _s3 = postgres_s3
    settings = Settings(
        admin_token=SecretStr(ADMIN_TOKEN),
        data_dir=tmp_path,
        database_url=SecretStr(realservers.new_database(postgres)),
        artifacts_url=f"s3://{realservers.S3_BUCKET}/{uuid.uuid4().hex}",
    )
    assert settings.artifacts_url is not None
    store = S3Artifacts.from_url(settings.artifacts_url)
    # another replica's upload, its artifacts stored and its row not committed yet
    sha = store.put(b"an upload in flight")
    ages = dict(store.list_aged())
    assert -60 < ages[sha] < 60  # LastModified is the PUT's time (within clock skew)
    with TestClient(create_app(settings)):
        assert sha in set(store.list())
    with TestClient(create_app(settings.model_copy(update={"artifact_gc_grace_s": 0}))):
        assert sha not in set(store.list())  # an orphan past the grace period is swept


def _assert_unavailable_and_unchanged(down: Any, client: TestClient, key: str) -> None:
    """The upload made while the store was down is 503 and left nothing: only version 1."""
    assert down.status_code == 503, down.text
    assert down.json()["code"] == "STORAGE_UNAVAILABLE"
    listed = client.get("/v1/models/m", headers=auth(key)).json()
    assert [v["version"] for v in listed["versions"]] == [1]  # nothing half-visible


def _restart(own_s3: realservers.Server) -> None:
    """SeaweedFS again on its folder and port: what it stored before is back."""
    restarted = realservers.start_seaweedfs(own_s3.root, s3_port=own_s3.port)
    own_s3.process = restarted.process


def test_s3_down_fails_upload_with_503_and_nothing_visible_then_recovers(
    postgres_s3: Servers,
    own_s3: realservers.Server,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name, value in realservers.s3_environment(own_s3).items():
        monkeypatch.setenv(name, value)
    settings = Settings(
        admin_token=SecretStr(ADMIN_TOKEN),
        data_dir=tmp_path,
        database_url=SecretStr(realservers.new_database(postgres_s3[0])),
        artifacts_url=f"s3://{realservers.S3_BUCKET}/faults",
    )
    first, second = affine().built(), affine().built()
    with TestClient(create_app(settings)) as client:
        key = new_tenant(client, "tenant-a")
        assert upload(client, key, built=first)["version"] == 1
        before = infer(client, key)

        own_s3.stop()
        _assert_unavailable_and_unchanged(post_upload(client, key, built=second), client, key)
        _restart(own_s3)
        assert upload(client, key, built=second)["version"] == 2
        after = infer(client, key)
    assert not np.allclose(before, after)  # version 2 is the new graph, served from S3


def test_s3_stopped_mid_upload_fails_it_with_503_and_leaves_nothing_then_recovers(
    postgres_s3: Servers,
    migrated_template: str,
    own_s3: realservers.Server,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name, value in realservers.s3_environment(own_s3).items():
        monkeypatch.setenv(name, value)
    database_url = realservers.new_database(postgres_s3[0], template=migrated_template)
    settings = Settings(
        admin_token=SecretStr(ADMIN_TOKEN),
        data_dir=tmp_path,
        database_url=SecretStr(database_url),
        artifacts_url=f"s3://{realservers.S3_BUCKET}/{uuid.uuid4().hex}",
    )
    first, second = affine().built(), affine().built()
    store = S3Artifacts.from_url(str(settings.artifacts_url))
    with TestClient(create_app(settings)) as client:
        key = new_tenant(client, "tenant-a")
        assert upload(client, key, built=first)["version"] == 1
        before = infer(client, key)
        stored = set(store.list())
        stopped_mid_body = threading.Event()

        def body() -> Iterator[bytes]:
            # The app is reading the request when the store goes away (read as it is received).
            yield b'--xx\r\nContent-Disposition: form-data; name="name"\r\n\r\nm\r\n'
            yield b'--xx\r\nContent-Disposition: form-data; name="program"; filename="p"\r\n\r\n'
            yield second.program[: len(second.program) // 2]
            own_s3.stop()
            stopped_mid_body.set()
            yield second.program[len(second.program) // 2 :] + b"\r\n"
            yield b'--xx\r\nContent-Disposition: form-data; name="params"; filename="q"\r\n\r\n'
            yield (second.params or b"") + b"\r\n--xx--\r\n"

        headers = {**auth(key), "Content-Type": "multipart/form-data; boundary=xx"}
        down = client.post("/v1/models", content=body(), headers=headers)
        assert stopped_mid_body.is_set()
        _assert_unavailable_and_unchanged(down, client, key)
        _restart(own_s3)
        # nothing of the failed upload stored, and nothing counted for it
        assert set(store.list()) == stored
        with create(database_url).connect() as connection:
            counted = set(connection.execute(text("SELECT sha256 FROM artifact_refs")).scalars())
        assert counted == stored
        assert upload(client, key, built=second)["version"] == 2
        assert not np.allclose(infer(client, key), before)  # the new graph, served from S3


# -- Redis: limits and invalidation across replicas ---------------------------------------------


def test_rate_budget_is_one_across_limiters(redis_server: realservers.Server) -> None:
    client = redis.Redis(port=redis_server.port)
    tenant = uuid.uuid4().hex
    a, b = RedisRateLimiter(client, 0.001, 5), RedisRateLimiter(client, 0.001, 5)
    waits = [(a if i % 2 else b).wait_s(tenant) for i in range(6)]
    assert waits[:5] == [0.0] * 5
    assert waits[5] > 100  # the sixth waits for a token at 0.001/s, whichever replica asks


def test_concurrency_slots_are_one_budget_across_limiters(redis_server: realservers.Server) -> None:
    client = redis.Redis(port=redis_server.port)
    tenant = uuid.uuid4().hex
    a, b = RedisConcurrencyLimiter(client, 2), RedisConcurrencyLimiter(client, 2)
    a.acquire(tenant)
    b.acquire(tenant)
    with pytest.raises(TooManyConcurrent):
        a.acquire(tenant)
    b.release(tenant)
    a.acquire(tenant)  # the slot b gave back is free on a
    assert b.in_flight(tenant) == 2


def test_revocation_and_delete_reach_the_other_replica_before_its_caches_expire(
    replicas: Replicas,
) -> None:
    # Long TTLs: only the published invalidation can make the other replica see the writes.
    one, two = replicas(2, auth_cache_ttl_s=300.0, model_lookup_ttl_s=300.0)
    key = new_tenant(one, "tenant-a")
    upload(one, key, built=affine().built())
    old = infer(two, key)  # cached on two: key, lookup and compiled session

    one.delete("/v1/models/m", headers=auth(key))
    assert _eventually(lambda: _status(two, key) == 404)
    upload(one, key, built=affine().built())  # version 1 again, other bytes
    assert _eventually(lambda: _status(two, key) == 200)
    assert np.allclose(infer(two, key), infer(one, key))
    assert not np.allclose(infer(two, key), old)  # never the deleted graph

    key_id = key.split("_")[1]
    revoked = one.delete(f"/v1/admin/keys/{key_id}", headers=auth(ADMIN_TOKEN))
    assert revoked.status_code == 200, revoked.text
    assert _eventually(lambda: _status(two, key) == 401)


def test_policy_quota_and_suspension_reach_the_other_replica_before_its_caches_expire(
    replicas: Replicas,
) -> None:
    one, two = replicas(2, auth_cache_ttl_s=300.0, model_lookup_ttl_s=300.0)
    key = new_tenant(one, "tenant-a")
    upload(one, key, built=affine().built())
    assert _status(two, key) == 200  # cached on two: key, lookup and compiled session

    # a policy tightened on one blocks the version on two (its cached lookup is dropped)
    assert _admin_put(one, "policy", max_flops_per_sample=1) == 200
    assert _eventually(lambda: _status(two, key) == 409)
    refused = _upload_status(two, key, "n")
    assert refused == (422, "OVER_TENANT_POLICY")  # two validates with the new policy
    assert _admin_put(one, "policy", max_flops_per_sample=None) == 200
    assert _eventually(lambda: _status(two, key) == 200)

    # a quota set on one holds on two
    assert _admin_put(one, "quota", max_models=1) == 200
    # (a new name each try: one uploaded before the message arrived must not hide it)
    fresh = lambda: _upload_status(two, key, uuid.uuid4().hex[:8]) == (403, "QUOTA_EXCEEDED")
    assert _eventually(fresh)

    # suspended on one: refused on two; resumed: served again
    suspend = one.post("/v1/admin/tenants/tenant-a/suspend", headers=auth(ADMIN_TOKEN))
    assert suspend.status_code == 200, suspend.text
    assert _eventually(lambda: _status(two, key) == 403)
    resume = one.post("/v1/admin/tenants/tenant-a/resume", headers=auth(ADMIN_TOKEN))
    assert resume.status_code == 200, resume.text
    assert _eventually(lambda: _status(two, key) == 200)


def _admin_put(client: TestClient, what: str, **changes: object) -> int:
    url = f"/v1/admin/tenants/tenant-a/{what}"
    return client.put(url, json=changes, headers=auth(ADMIN_TOKEN)).status_code


def _upload_status(client: TestClient, key: str, name: str) -> tuple[int, str]:
    response = post_upload(client, key, name, affine().built())
    return response.status_code, response.json().get("code", "")


def test_rate_limit_holds_across_replicas(replicas: Replicas) -> None:
    clients = replicas(3, tenant_rate_per_s=0.01, tenant_rate_burst=6)
    key = new_tenant(clients[0], "tenant-a")
    answers = [clients[i % 3].get("/v1/models", headers=auth(key)).status_code for i in range(9)]
    assert answers == [200] * 6 + [429] * 3


def _status(client: TestClient, key: str) -> int:
    body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": X.ravel().tolist()}]
    }
    return client.post("/v2/models/m/infer", json=body, headers=auth(key)).status_code


# A published invalidation arrives in well under a millisecond, and one check (an inference, or
# an upload that compiles) well under a second: 10 s is over ten times that, and far short of the
# 300 s TTLs that would otherwise make the replica see the change.
def _eventually(check: Callable[[], bool], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
