"""The service starts from its factory and answers the V2 health and metadata routes."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from server.main import create_app
from server.settings import Settings


def _client(tmp_path: Path) -> TestClient:
    return TestClient(create_app(Settings(data_dir=tmp_path)))


def test_live_ready_and_metadata(tmp_path: Path) -> None:
    client = _client(tmp_path)
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").json() == {"ready": True}
    assert client.get("/v2").json()["name"] == "graphgate"


def test_unknown_route_uses_the_error_shape(tmp_path: Path) -> None:
    response = _client(tmp_path).get("/v2/nope")
    assert response.status_code == 404
    assert response.json() == {"error": "Not Found", "code": "NOT_FOUND"}
