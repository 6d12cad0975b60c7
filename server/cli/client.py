"""The admin commands' HTTP client (`graphgate tenants|admins|policy|quota|audit ...`): the
server and token options they share, and one request that turns an error answer into a
one-line message and exit status 1 instead of a traceback."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

UrlOpt = Annotated[str, typer.Option("--url", envvar="GRAPHGATE_URL", help="Server URL.")]
TokenOpt = Annotated[
    str,
    typer.Option("--admin-token", envvar="GRAPHGATE_ADMIN_TOKEN", help="Admin token."),
]
DEFAULT_URL = "http://127.0.0.1:8000"


def admin_call(
    method: str, url: str, path: str, token: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON answer of the admin REST `path` on the server at `url`, called with `token`."""
    import httpx2

    if not token:
        die("an admin token is needed: --admin-token or GRAPHGATE_ADMIN_TOKEN")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        response = httpx2.request(method, url.rstrip("/") + path, json=body, headers=headers)
    except httpx2.HTTPError as e:
        die(f"cannot reach {url}: {e}")
    answer: dict[str, Any] = response.json() if response.content else {}
    if response.status_code >= 400:
        die(
            f"{answer.get('error', response.reason_phrase)} [{answer.get('code', response.status_code)}]"
        )
    return answer


def die(message: str) -> NoReturn:
    typer.echo(f"graphgate: {message}", err=True)
    raise typer.Exit(1)
