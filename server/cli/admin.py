"""`graphgate admins|policy|quota|audit ...`: the operator's admin REST from the command line.

Over HTTP like `graphgate tenants`, so every command is audited under the operator whose key
it uses (GRAPHGATE_ADMIN_TOKEN or --admin-token).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from server.cli.client import DEFAULT_URL, TokenOpt, UrlOpt, admin_call

admins = typer.Typer(help="Manage operators: admins change things, viewers only read.")
policy = typer.Typer(help="Show or set a tenant's policy (what it may upload).")
quota = typer.Typer(help="Show or set a tenant's quotas (rate, concurrency, storage, counts).")
audit = typer.Typer(help="Read the audit log.", invoke_without_command=True)

SetOpt = Annotated[
    list[str],
    typer.Argument(
        help="FIELD=VALUE pairs, VALUE as JSON (null: back to the default), or FIELD=@FILE for "
        "a file's text (e.g. signing_keys=@key.pub, signing_ca=@ca.pem)"
    ),
]


@admins.command("create")
def create_admin(
    name: str,
    role: Annotated[str, typer.Option("--role", help="admin or viewer")] = "viewer",
    url: UrlOpt = DEFAULT_URL,
    admin_token: TokenOpt = "",
) -> None:
    """Creates an operator and prints its key (shown this once)."""
    body = admin_call("POST", url, "/v1/admin/admins", admin_token, {"name": name, "role": role})
    typer.echo(f"{body['role']} {body['name']!r} created; key id {body['key_id']}")
    typer.echo(f"API key (shown once, store it now): {body['key']}")


@admins.command("list")
def list_admins(url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Lists operators, their roles and key ids (never secrets)."""
    for admin in admin_call("GET", url, "/v1/admin/admins", admin_token)["admins"]:
        state = f"revoked {admin['revoked']}" if admin["revoked"] else "active"
        typer.echo(f"{admin['name']}  {admin['role']}  {state}  {' '.join(admin['key_ids'])}")


@admins.command("revoke")
def revoke_admin(name: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Revokes an operator and its keys."""
    admin_call("DELETE", url, f"/v1/admin/admins/{name}", admin_token)
    typer.echo(f"admin {name!r} revoked")


@policy.command("show")
def show_policy(tenant: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Prints the tenant's effective policy and which fields are its own, as JSON."""
    body = admin_call("GET", url, f"/v1/admin/tenants/{tenant}/policy", admin_token)
    typer.echo(json.dumps({k: body[k] for k in ("policy", "policy_overrides")}, indent=2))


@policy.command("set")
def set_policy(
    tenant: str, changes: SetOpt, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = ""
) -> None:
    """Sets policy fields, e.g. `max_batch=8 allowed_ops='["relu"]'` or
    `require_signature=true signing_keys=@key.pub`; blocks or unblocks the tenant's stored
    versions accordingly."""
    path = f"/v1/admin/tenants/{tenant}/policy"
    body = admin_call("PUT", url, path, admin_token, _pairs(changes))
    typer.echo(json.dumps(body["policy_overrides"], indent=2))
    for label in body["blocked"]:
        typer.echo(f"blocked {label}")
    for label in body["unblocked"]:
        typer.echo(f"unblocked {label}")


@quota.command("show")
def show_quota(tenant: str, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = "") -> None:
    """Prints the tenant's effective quotas and which are its own, as JSON."""
    body = admin_call("GET", url, f"/v1/admin/tenants/{tenant}/quota", admin_token)
    typer.echo(json.dumps({k: body[k] for k in ("quota", "quota_overrides")}, indent=2))


@quota.command("set")
def set_quota(
    tenant: str, changes: SetOpt, url: UrlOpt = DEFAULT_URL, admin_token: TokenOpt = ""
) -> None:
    """Sets quota fields, e.g. `max_models=10 rate_per_s=5`."""
    body = admin_call("PUT", url, f"/v1/admin/tenants/{tenant}/quota", admin_token, _pairs(changes))
    typer.echo(json.dumps(body["quota"], indent=2))


@audit.callback()
def read_audit(
    actor: Annotated[str | None, typer.Option(help="admin:<name> or tenant:<name>")] = None,
    action: Annotated[str | None, typer.Option(help="e.g. model.upload")] = None,
    tenant: Annotated[str | None, typer.Option()] = None,
    since: Annotated[str | None, typer.Option(help="ISO time, UTC")] = None,
    until: Annotated[str | None, typer.Option(help="ISO time, UTC")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    url: UrlOpt = DEFAULT_URL,
    admin_token: TokenOpt = "",
) -> None:
    """Prints audit entries, newest first, one JSON document a line."""
    filters = {"actor": actor, "action": action, "tenant": tenant, "since": since, "until": until}
    query = "&".join(f"{k}={v}" for k, v in filters.items() if v is not None)
    path = f"/v1/admin/audit?limit={limit}" + (f"&{query}" if query else "")
    for entry in admin_call("GET", url, path, admin_token)["entries"]:
        typer.echo(json.dumps(entry, sort_keys=True))


def _pairs(changes: list[str]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for change in changes:
        field, sep, raw = change.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected FIELD=VALUE, got {change!r}")
        if raw.startswith("@"):  # PEM keys and certificates: a file's text
            parsed[field] = _file_text(field, raw[1:])
            continue
        try:
            parsed[field] = json.loads(raw)
        except json.JSONDecodeError:
            raise typer.BadParameter(f"{field}: expected a JSON value, got {raw!r}") from None
    return parsed


def _file_text(field: str, path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise typer.BadParameter(f"{field}: cannot read {path}: {e}") from None
