"""Layered server fixtures: settings on a temp data dir, a client running the lifespan, keys.

Every test that asks for `backend` (directly, or through `settings`, `make_settings`, `client`,
`backend_env` and everything built on them) runs once per backend: `embedded` (SQLite and the
artifacts folder in the data directory) and `postgres_s3` (a fresh database cloned from a
migrated template on a real PostgreSQL, and a fresh key prefix in a real SeaweedFS bucket, both
started once per session by tests/support/realservers.py). A module opts out only by being listed in
SINGLE_BACKEND with its reason; `@pytest.mark.embedded_only` keeps one test that looks inside
the data directory itself (the SQLite file, the artifacts folder) on the first.
`backend` is module-scoped, so a module-scoped `graphgate serve` fixture can take it too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from server.db.engine import create, migrate
from server.main import create_app
from server.settings import Settings
from tests.support import realservers
from tests.support.api import ADMIN_TOKEN, new_tenant
from tests.support.backends import SettingsFactory, backend_environment, backend_locations

Servers = tuple[realservers.Server, realservers.Server]

BACKENDS = ("embedded", "postgres_s3")
# Modules that stay on `embedded`, and why. Every other module in tests/server runs each test
# that takes `backend` on both.
SINGLE_BACKEND = {
    # never open the app's database or artifact store
    "test_cli_check": "validates local files with the CLI; no server, no storage",
    "test_cli_convert_run": "converts and runs local files with the CLI; no server, no storage",
    "test_v2_codec": "pure V2 codec (bytes <-> tensors)",
    "test_artifacts_crash": "the folder store's own temp-file crash safety (an S3 PUT has none)",
    "test_http_abuse": "header/body/idle abuse of the HTTP server, answered before any storage",
    # already run on PostgreSQL + S3 + Redis themselves, in every run
    "test_replicas": "its cluster always runs on PostgreSQL, S3 and Redis",
    # long load runs whose subject is scheduling, not storage: a second backend would double
    # minutes of CI for no storage coverage (the uploads they make are covered elsewhere)
    "test_soak": "a load/memory soak; its uploads are covered by every other module",
    "test_fairness": "a fairness flood; its uploads are covered by every other module",
    "test_disconnect": "seconds-long matmuls cancelled on disconnect: workers, not storage",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    both = module not in SINGLE_BACKEND and not metafunc.definition.get_closest_marker(
        "embedded_only"
    )
    metafunc.parametrize("backend", BACKENDS if both else BACKENDS[:1], scope="module")


@pytest.fixture(scope="session")
def postgres_s3() -> Iterator[Servers]:
    """A PostgreSQL cluster and a SeaweedFS S3 server for the whole session; boto3 finds the
    S3 endpoint and credentials in the AWS_* environment variables, as in production."""
    with realservers.scratch() as root:
        yield from _postgres_s3(root)


def _postgres_s3(root: Path) -> Iterator[Servers]:
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


@pytest.fixture(scope="session")
def migrated_template(postgres_s3: Servers) -> str:
    """A database migrated once to the newest schema: cloning it (CREATE DATABASE ... TEMPLATE)
    gives each test a fresh database without running every migration again."""
    url = realservers.new_database(postgres_s3[0])
    engine = create(url)
    migrate(engine)
    engine.dispose()  # CREATE DATABASE ... TEMPLATE refuses a template anyone is connected to
    return url.rsplit("/", 1)[-1]


@pytest.fixture
def make_settings(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> SettingsFactory:
    """Settings(**values) on this test's backend; each call gets its own fresh database and
    artifact store (copy the result with model_copy to share them, as replicas do)."""

    def make(**values: Any) -> Settings:
        values.setdefault("data_dir", tmp_path / "data")
        values.setdefault("admin_token", SecretStr(ADMIN_TOKEN))
        return Settings(**values, **backend_locations(backend, request))

    return make


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings()


@pytest.fixture
def backend_env(backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """Environment for one `graphgate serve` on this test's backend (fresh database and store)."""
    return backend_environment(backend, request)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:  # `with` runs the lifespan
        yield c


@pytest.fixture
def key_a(client: TestClient) -> str:
    return new_tenant(client, "tenant-a")


@pytest.fixture
def key_b(client: TestClient) -> str:
    return new_tenant(client, "tenant-b")
