"""Layered server fixtures: settings on a temp data dir, a client running the lifespan, keys.

`settings` (and so `client` and everything built on it) runs a test once per `backend`:
`embedded` (SQLite and the artifacts folder in the data directory) and `postgres_s3` (a fresh
database on a real PostgreSQL and a fresh key prefix in a real SeaweedFS bucket, both started
once per session by tests/realservers.py). To bound CI time the second runs for the modules
that exercise storage and metadata (POSTGRES_S3_MODULES); `@pytest.mark.embedded_only` keeps a
test that looks inside the data directory itself on the first. Tests that build their own
Settings stay embedded.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from server.main import create_app
from server.settings import Settings
from tests import realservers

ADMIN_TOKEN = "test-admin-token-0123456789abcdef0123456789"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


BACKENDS = ("embedded", "postgres_s3")
POSTGRES_S3_MODULES = frozenset(
    {"test_models_api", "test_v2_routes", "test_health", "test_quota_gc", "test_backends"}
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    both = module in POSTGRES_S3_MODULES and not metafunc.definition.get_closest_marker(
        "embedded_only"
    )
    metafunc.parametrize("backend", BACKENDS if both else BACKENDS[:1])


@pytest.fixture(scope="session")
def postgres_s3() -> Iterator[tuple[realservers.Server, realservers.Server]]:
    """A PostgreSQL cluster and a SeaweedFS S3 server for the whole session; boto3 finds the
    S3 endpoint and credentials in the AWS_* environment variables, as in production."""
    with realservers.scratch() as root:
        yield from _postgres_s3(root)


def _postgres_s3(root: Path) -> Iterator[tuple[realservers.Server, realservers.Server]]:
    postgres = realservers.start_postgres(root / "postgres")
    try:
        s3 = realservers.start_seaweedfs(root / "s3")
    except BaseException:
        postgres.stop()
        raise
    saved = {name: os.environ.get(name) for name in realservers.s3_environment(s3)}
    os.environ.update(realservers.s3_environment(s3))
    try:
        yield postgres, s3
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        s3.stop()
        postgres.stop()


@pytest.fixture
def settings(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Settings:
    if backend == "embedded":
        return Settings(data_dir=tmp_path / "data", admin_token=SecretStr(ADMIN_TOKEN))
    postgres, _s3 = request.getfixturevalue("postgres_s3")
    return Settings(
        data_dir=tmp_path / "data",
        admin_token=SecretStr(ADMIN_TOKEN),
        database_url=SecretStr(realservers.new_database(postgres)),
        artifacts_url=f"s3://{realservers.S3_BUCKET}/{uuid.uuid4().hex}",
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:  # `with` runs the lifespan
        yield c


def new_tenant(client: TestClient, name: str) -> str:
    """Creates a tenant through the admin API; returns its key."""
    response = client.post("/v1/admin/tenants", json={"name": name}, headers=auth(ADMIN_TOKEN))
    assert response.status_code == 201, response.text
    key: str = response.json()["key"]
    return key


@pytest.fixture
def key_a(client: TestClient) -> str:
    return new_tenant(client, "tenant-a")


@pytest.fixture
def key_b(client: TestClient) -> str:
    return new_tenant(client, "tenant-b")
