"""The service starts from its factory and answers the V2 health and metadata routes."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_live_ready_and_metadata(client: TestClient) -> None:
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").json() == {"ready": True}
    assert client.get("/v2").json()["name"] == "graphgate"


def test_unknown_route_uses_the_error_shape(client: TestClient) -> None:
    response = client.get("/v2/nope")
    assert response.status_code == 404
    assert response.json() == {"error": "Not Found", "code": "NOT_FOUND"}
