"""The calls every server test makes first: authorization headers with the admin token the test
servers start with, a tenant (through an in-process app or over HTTP), an error body's shape."""

from __future__ import annotations

from typing import Any, Final, Protocol

import httpx2

ADMIN_TOKEN: Final = "test-admin-token-0123456789abcdef0123456789"


class Served(Protocol):
    """Anything reachable over HTTP at `url` (a `graphgate serve` process)."""

    url: str


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def base_url(target: Served | str) -> str:
    return target if isinstance(target, str) else target.url


def new_tenant(client: Any, name: str) -> str:
    """Creates a tenant through the admin API of an in-process app (a TestClient); returns its
    key."""
    response = client.post("/v1/admin/tenants", json={"name": name}, headers=auth(ADMIN_TOKEN))
    assert response.status_code == 201, response.text
    key: str = response.json()["key"]
    return key


def post_tenant(server: Served | str, name: str) -> str:
    """Creates a tenant through the admin REST API of a served process; returns its key."""
    created = httpx2.post(
        f"{base_url(server)}/v1/admin/tenants", json={"name": name}, headers=auth(ADMIN_TOKEN)
    )
    assert created.status_code == 201, created.text
    key: str = created.json()["key"]
    return key


def assert_error(response: Any, status: int, code: str) -> None:
    """The response is `status` with the stable error `code`, a message, and nothing else but
    the diagnostics."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code
    assert isinstance(body["error"], str)
    assert set(body) <= {"error", "code", "diagnostics"}
