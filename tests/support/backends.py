"""Where a server test keeps its metadata and artifacts: nothing to add for `embedded` (the data
directory holds both), a fresh database cloned from a migrated template and a fresh S3 key
prefix for `postgres_s3`. tests/server/conftest.py's fixtures call these with their request."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import SecretStr

from server.settings import Settings
from tests.support import realservers

SettingsFactory = Callable[..., Settings]  # conftest's `make_settings`


def backend_locations(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Settings fields that put a fresh, empty metadata database and artifact store on
    `backend` (none for `embedded`: the data directory holds both)."""
    if backend == "embedded":
        return {}
    postgres, _s3 = request.getfixturevalue("postgres_s3")
    template = request.getfixturevalue("migrated_template")
    return {
        "database_url": SecretStr(realservers.new_database(postgres, template=template)),
        "artifacts_url": f"s3://{realservers.S3_BUCKET}/{uuid.uuid4().hex}",
    }


def backend_environment(backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """The same as environment variables, for a `graphgate serve` process."""
    locations = backend_locations(backend, request)
    if not locations:
        return {}
    return {
        **realservers.s3_environment(request.getfixturevalue("postgres_s3")[1]),
        "GRAPHGATE_DATABASE_URL": locations["database_url"].get_secret_value(),
        "GRAPHGATE_ARTIFACTS_URL": locations["artifacts_url"],
    }


def database_bytes(settings: Settings) -> bytes:
    """What the metadata database holds at rest: the SQLite file, or PostgreSQL's rows."""
    if settings.database_url is None:
        return (settings.data_dir / "graphgate.db").read_bytes()
    return realservers.dump(settings.database_url.get_secret_value())
