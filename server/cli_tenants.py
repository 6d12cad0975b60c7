"""`graphgate tenants ...`: the admin REST API from the command line (over HTTP)."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

tenants = typer.Typer(help="Manage tenants and their API keys (admin token needed).")

UrlOpt = Annotated[str, typer.Option("--url", envvar="GRAPHGATE_URL", help="Server URL.")]
TokenOpt = Annotated[
    str,
    typer.Option("--admin-token", envvar="GRAPHGATE_ADMIN_TOKEN", help="Admin token."),
]
DEFAULT_URL = "http://127.0.0.1:8000"


@tenants.command("create")
def create(name: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Creates a tenant and prints its API key (shown this once)."""
    body = _call("POST", url, "/v1/admin/tenants", admin_token, {"name": name})
    typer.echo(f"tenant {body['tenant']!r} created; key id {body['key_id']}")
    typer.echo(f"API key (shown once, store it now): {body['key']}")


@tenants.command("add-key")
def add_key(name: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Adds an API key to a tenant (rotation) and prints it once."""
    body = _call("POST", url, f"/v1/admin/tenants/{name}/keys", admin_token)
    typer.echo(f"key id {body['key_id']}\nAPI key (shown once, store it now): {body['key']}")


@tenants.command("list")
def list_(url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Lists tenants and their keys (ids only, never secrets)."""
    for tenant in _call("GET", url, "/v1/admin/tenants", admin_token)["tenants"]:
        typer.echo(f"{tenant['tenant']}  (created {tenant['created']})")
        for key in tenant["keys"]:
            state = f"revoked {key['revoked']}" if key["revoked"] else "active"
            typer.echo(f"  {key['key_id']}  {key['role']}  {state}")


@tenants.command("revoke-key")
def revoke_key(key_id: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Revokes an API key by its id: it stops working at once."""
    body = _call("DELETE", url, f"/v1/admin/keys/{key_id}", admin_token)
    typer.echo(f"key {body['key_id']} revoked at {body['revoked']}")


@tenants.command("release")
def release(
    tenant: str, model: str, version: int, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = ""
) -> None:
    """Releases a quarantined model version (one that crashed its workers) so it runs again."""
    path = f"/v1/admin/quarantine/{tenant}/{model}/{version}/release"
    body = _call("POST", url, path, admin_token)
    typer.echo(f"{body['tenant']}/{body['name']} version {body['version']} released")


def _call(
    method: str, url: str, path: str, token: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    import httpx2

    if not token:
        _die("an admin token is needed: --admin-token or GRAPHGATE_ADMIN_TOKEN")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        response = httpx2.request(method, url.rstrip("/") + path, json=body, headers=headers)
    except httpx2.HTTPError as e:
        _die(f"cannot reach {url}: {e}")
    answer: dict[str, Any] = response.json() if response.content else {}
    if response.status_code >= 400:
        _die(
            f"{answer.get('error', response.reason_phrase)} [{answer.get('code', response.status_code)}]"
        )
    return answer


def _die(message: str) -> NoReturn:
    typer.echo(f"graphgate: {message}", err=True)
    raise typer.Exit(1)
