"""`graphgate tenants ...`: the admin REST API from the command line (over HTTP)."""

from __future__ import annotations

import typer

from server.cli.client import DEFAULT_URL, TokenOpt, UrlOpt, admin_call

tenants = typer.Typer(help="Manage tenants and their API keys (admin token needed).")


@tenants.command("create")
def create(name: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Creates a tenant and prints its API key (shown this once)."""
    body = admin_call("POST", url, "/v1/admin/tenants", admin_token, {"name": name})
    typer.echo(f"tenant {body['tenant']!r} created; key id {body['key_id']}")
    typer.echo(f"API key (shown once, store it now): {body['key']}")


@tenants.command("add-key")
def add_key(name: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Adds an API key to a tenant (rotation) and prints it once."""
    body = admin_call("POST", url, f"/v1/admin/tenants/{name}/keys", admin_token)
    typer.echo(f"key id {body['key_id']}\nAPI key (shown once, store it now): {body['key']}")


@tenants.command("list")
def list_(url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Lists tenants and their keys (ids only, never secrets)."""
    for tenant in admin_call("GET", url, "/v1/admin/tenants", admin_token)["tenants"]:
        typer.echo(f"{tenant['tenant']}  (created {tenant['created']})")
        for key in tenant["keys"]:
            state = f"revoked {key['revoked']}" if key["revoked"] else "active"
            typer.echo(f"  {key['key_id']}  {key['role']}  {state}")


@tenants.command("revoke-key")
def revoke_key(key_id: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Revokes an API key by its id: it stops working at once."""
    body = admin_call("DELETE", url, f"/v1/admin/keys/{key_id}", admin_token)
    typer.echo(f"key {body['key_id']} revoked at {body['revoked']}")


@tenants.command("release")
def release(
    tenant: str, model: str, version: int, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = ""
) -> None:
    """Releases a quarantined model version (one that crashed its workers) so it runs again."""
    path = f"/v1/admin/quarantine/{tenant}/{model}/{version}/release"
    body = admin_call("POST", url, path, admin_token)
    typer.echo(f"{body['tenant']}/{body['name']} version {body['version']} released")
