"""One way to upload a model in tests: the multipart parts of a program, posted to an in-process
app (FastAPI's TestClient, or any client with a base URL) or over HTTP to a served process.

Every helper takes (where, key, name, built) in that order; the name defaults to "m" and the
program to AFFINE."""

from __future__ import annotations

from typing import Any, Final

import httpx2

from tests.support.api import Served, auth, base_url
from tests.support.builders import Built, affine

AFFINE: Final = affine().built()


def upload_files(built: Built) -> dict[str, bytes]:
    """The parts of an upload or a check: the program, and its params when it has any."""
    return {"program": built.program, **({"params": built.params} if built.params else {})}


def post_upload(client: Any, key: str, name: str = "m", built: Built = AFFINE) -> Any:
    """POST /v1/models through `client` (a TestClient, or an httpx2.Client with a base URL);
    the response, whatever its status."""
    return client.post(
        "/v1/models", data={"name": name}, files=upload_files(built), headers=auth(key)
    )


def upload(client: Any, key: str, name: str = "m", built: Built = AFFINE) -> dict[str, Any]:
    """An upload that must succeed (201); its body (version, status, report)."""
    response = post_upload(client, key, name, built)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def post_check(client: Any, key: str, built: Built = AFFINE) -> Any:
    """POST /v1/check through `client`: validation without storing; the response."""
    return client.post("/v1/check", files=upload_files(built), headers=auth(key))


def post_model(
    server: Served | str, key: str, name: str = "m", built: Built = AFFINE
) -> httpx2.Response:
    """POST /v1/models over HTTP to a served process (or a base URL); the response."""
    return httpx2.post(
        f"{base_url(server)}/v1/models",
        data={"name": name},
        files=upload_files(built),
        headers=auth(key),
        timeout=60,
    )
