"""Layered server fixtures: settings on a temp data dir, a client running the lifespan, keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from server.main import create_app
from server.settings import Settings

ADMIN_TOKEN = "test-admin-token-0123456789abcdef0123456789"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", admin_token=SecretStr(ADMIN_TOKEN))


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
