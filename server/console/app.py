"""The console's pages under /admin (HTTP only): an app of its own, mounted by create_app.

Its own app so that its cookie session, CSRF checks, HTML error pages and security headers
apply to its pages alone and cost the API's routes nothing. Every form works without
JavaScript: a POST answers with the page it changed (or a 303 back to it).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import quote

from fastapi import FastAPI, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import State
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.console.overview import overview
from server.console.queries import ConsoleQueries
from server.console.sessions import ConsoleSessions, CsrfFailed, SessionInfo, csrf_ok
from server.dispatch.signing import fingerprint_of_pem
from server.errors import (
    BadRequest,
    InvalidRules,
    NotFound,
    ServiceError,
    TooManyRequests,
    Unauthorized,
)
from server.http.admin_deps import request_id
from server.http.errors import status_of
from server.http.params import KeyId, ModelName, TenantName, Version
from server.services.audit import MAX_ID, AuditQuery, utc_moment
from server.services.operators import Operator, OperatorService
from server.services.policies import POLICY_FIELDS, QUOTA_FIELDS, TenantRulesView
from server.services.types import Principal, check_name
from server.settings import POLICY_FIELDS as SERVER_POLICY_FIELDS
from validator.ops import REGISTRY

HERE: Final = Path(__file__).resolve().parent
SESSION_COOKIE: Final = "gg_session"
LOGIN_COOKIE: Final = "gg_login"  # the login form's CSRF token (double submit: no session yet)
PREFIX: Final = "/admin"
SECURITY_HEADERS: Final = (
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'; form-action 'self'"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
)
AUDIT_PAGE: Final = 50
# The policy form's numeric fields, from the one field list: "Max batch" (the setting's
# description as its hint).
POLICY_LABELS: Final = tuple(
    (name, name.replace("_", " ").capitalize().replace("Max ops", "Max op count"))
    for name in SERVER_POLICY_FIELDS
)


class LoginNeeded(Exception):
    """No live session: the page answers with a redirect to the login form."""


@dataclass(frozen=True, slots=True)
class Page:
    """What a page needs besides its own data: the operator and the form token."""

    operator: Principal
    csrf: str
    path: str


class SecurityHeaders:
    """Adds the console's security headers to every response of the console app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def start(state: State, sessions: Any) -> None:
    """Start-up, once the operator services exist on the main app's state."""
    settings = state.settings
    state.console_sessions = ConsoleSessions(
        sessions,
        state.admins,
        idle_s=settings.console_idle_s,
        max_s=settings.console_max_s,
        attempts_per_minute=settings.console_login_attempts,
    )
    state.console_queries = ConsoleQueries(sessions)


def build(main: State) -> FastAPI:
    """The console app; `main` is the main app's state (services, settings), read per request."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.main = main
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals["prefix"] = PREFIX
    templates.env.filters["size"] = _size
    templates.env.filters["when"] = _when
    templates.env.filters["readable"] = _readable
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.add_middleware(SecurityHeaders)
    _routes(app, templates)
    _error_pages(app, templates)
    return app


# -- sessions and forms ------------------------------------------------------------------------


def _main(request: Request) -> State:
    main: State = request.app.state.main
    return main


def _session(request: Request) -> SessionInfo:
    cookie = request.cookies.get(SESSION_COOKIE, "")
    info: SessionInfo | None = None
    if cookie:
        info = _main(request).console_sessions.current(cookie)
    if info is None:
        raise LoginNeeded()
    return info


def _reader(request: Request) -> Page:
    info = _session(request)
    return Page(info.principal, info.csrf, request.url.path)


def _writer(request: Request, csrf: str) -> Page:
    """The operator behind a state-changing form, once its CSRF token is checked (its role is
    the operator service's to check, as for the REST routes)."""
    info = _session(request)
    if not csrf_ok(request.cookies.get(SESSION_COOKIE, ""), csrf):
        raise CsrfFailed("expected the form's CSRF token, got none or a wrong one")
    return Page(info.principal, info.csrf, request.url.path)


def _operator(request: Request, page: Page) -> Operator:
    client = request.client.host if request.client else None
    return Operator(page.operator, request_id(request), client)


def _operators(request: Request) -> OperatorService:
    operators: OperatorService = _main(request).operators
    return operators


def _as_tenant(tenant_id: str, page: Page) -> Principal:
    """The tenant's scope for an operator acting on its models (the model service's lookups)."""
    return Principal(tenant_id, page.operator.key_id, False, page.operator.operator)


CsrfField = Annotated[str, Form()]


# -- the pages -------------------------------------------------------------------------------


def _routes(app: FastAPI, templates: Jinja2Templates) -> None:
    def render(
        request: Request, template: str, page: Page | None, status: int = 200, **data: Any
    ) -> HTMLResponse:
        return templates.TemplateResponse(
            request, template, {"page": page, **data}, status_code=status
        )

    @app.get("/login")
    def login_form(request: Request) -> HTMLResponse:
        return _login_page(request, render, None, 200)

    @app.post("/login")
    def login(request: Request, key: Annotated[str, Form()] = "", csrf: CsrfField = "") -> Response:
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not secrets.compare_digest(expected, csrf):
            raise CsrfFailed("expected the login form's CSRF token, got none or a wrong one")
        client = request.client.host if request.client else None
        try:
            session_id, _ = _main(request).console_sessions.login(key, request_id(request), client)
        except Unauthorized:
            return _login_page(request, render, "That key is not an operator's key.", 401)
        response = RedirectResponse(f"{PREFIX}/", status_code=303)
        _set_cookie(request, response, SESSION_COOKIE, session_id)
        response.delete_cookie(LOGIN_COOKIE, path=PREFIX)
        return response

    @app.post("/logout")
    def logout(request: Request, csrf: CsrfField = "") -> Response:
        cookie = request.cookies.get(SESSION_COOKIE, "")
        _session(request)
        if not csrf_ok(cookie, csrf):
            raise CsrfFailed("expected the form's CSRF token, got none or a wrong one")
        _main(request).console_sessions.logout(cookie)
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=PREFIX)
        return response

    @app.get("/")
    def overview_page(request: Request) -> HTMLResponse:
        page = _reader(request)
        main = _main(request)
        figures = overview(main.metrics, main.models, main.settings.use_cuda)
        return render(request, "overview.html", page, o=figures)

    @app.get("/tenants")
    def tenants_page(request: Request) -> HTMLResponse:
        page = _reader(request)
        rows = _main(request).console_queries.tenants()
        return render(request, "tenants.html", page, tenants=rows)

    @app.post("/tenants")
    def create_tenant(
        request: Request, name: Annotated[str, Form()] = "", csrf: CsrfField = ""
    ) -> HTMLResponse:
        page = _writer(request, csrf)
        try:
            issued = _operators(request).create_tenant(_operator(request, page), name.strip())
        except BadRequest as error:
            rows = _main(request).console_queries.tenants()
            return render(request, "tenants.html", page, 400, tenants=rows, error=error, name=name)
        return render(request, "key_issued.html", page, 201, issued=issued, new_tenant=True)

    @app.get("/tenants/{name}")
    def tenant_page(request: Request, name: TenantName) -> HTMLResponse:
        return _tenant_page(request, render, _reader(request), name)

    @app.post("/tenants/{name}/keys")
    def create_key(request: Request, name: TenantName, csrf: CsrfField = "") -> HTMLResponse:
        page = _writer(request, csrf)
        issued = _operators(request).create_key(_operator(request, page), name)
        return render(request, "key_issued.html", page, 201, issued=issued, new_tenant=False)

    @app.post("/tenants/{name}/keys/{key_id}/revoke")
    def revoke_key(
        request: Request, name: TenantName, key_id: KeyId, csrf: CsrfField = ""
    ) -> Response:
        page = _writer(request, csrf)
        _operators(request).revoke_key(_operator(request, page), key_id, name)
        return RedirectResponse(f"{PREFIX}/tenants/{name}", status_code=303)

    @app.post("/tenants/{name}/suspend")
    def suspend(request: Request, name: TenantName, csrf: CsrfField = "") -> Response:
        return _suspend(request, name, csrf, True)

    @app.post("/tenants/{name}/resume")
    def resume(request: Request, name: TenantName, csrf: CsrfField = "") -> Response:
        return _suspend(request, name, csrf, False)

    @app.post("/tenants/{name}/policy")
    async def set_policy(request: Request, name: TenantName) -> HTMLResponse:
        def changes(form: Any, current: TenantRulesView) -> dict[str, Any]:
            return _policy_changes(form, current.policy_json(), dict(current.policy_overrides))

        return await _set_policy_fields(request, name, "policy", changes)

    # Signed uploads: the signing fields of the policy, in a form of their own.
    @app.post("/tenants/{name}/signing")
    async def set_signing(request: Request, name: TenantName) -> HTMLResponse:
        def changes(form: Any, current: TenantRulesView) -> dict[str, Any]:
            return _signing_changes(form, current.signing.to_json())

        return await _set_policy_fields(request, name, "signing", changes)

    async def _set_policy_fields(
        request: Request,
        name: str,
        section: str,
        changes_of: Callable[[Any, TenantRulesView], dict[str, Any]],
    ) -> HTMLResponse:
        """One of the policy's forms: its changes set by the operator service (which audits
        them and the versions they block or unblock); a bad value is shown by its field."""
        form = await request.form()
        page = _writer(request, str(form.get("csrf", "")))
        current = await run_in_threadpool(_main(request).policies.show, name)
        changes = changes_of(form, current)
        who = _operator(request, page)
        try:
            change = await run_in_threadpool(_operators(request).set_policy, who, name, changes)
        except InvalidRules as error:
            return await run_in_threadpool(
                _tenant_page, request, render, page, name, error, section, dict(form)
            )
        notice = _policy_notice(change.blocked, change.unblocked)
        return await run_in_threadpool(
            _tenant_page, request, render, page, name, None, "", None, notice
        )

    @app.post("/tenants/{name}/quota")
    async def set_quota(request: Request, name: TenantName) -> HTMLResponse:
        form = await request.form()
        page = _writer(request, str(form.get("csrf", "")))
        main = _main(request)
        current = await run_in_threadpool(main.policies.show, name)
        changes = _field_changes(
            form, QUOTA_FIELDS, _quota_values(current.quota), dict(current.quota_overrides)
        )
        who = _operator(request, page)
        try:
            await run_in_threadpool(_operators(request).set_quota, who, name, changes)
        except InvalidRules as error:
            return await run_in_threadpool(
                _tenant_page, request, render, page, name, error, "quota", dict(form)
            )
        return await run_in_threadpool(
            _tenant_page, request, render, page, name, None, "", None, "Quota saved."
        )

    @app.get("/models")
    def models_page(
        request: Request,
        tenant: Annotated[str, Query(max_length=64)] = "",
        page_number: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
    ) -> HTMLResponse:
        page = _reader(request)
        main = _main(request)
        listed = main.console_queries.models(tenant or None, page_number)
        rejections = main.uploads.rejections(tenant) if tenant else []
        return render(
            request, "models.html", page, listed=listed, tenant=tenant, rejections=rejections
        )

    @app.get("/models/{tenant}/{name}/{version}")
    def version_page(
        request: Request, tenant: TenantName, name: ModelName, version: Version
    ) -> HTMLResponse:
        page = _reader(request)
        detail = _main(request).console_queries.version(tenant, name, version)
        if detail is None:
            raise NotFound(f"no version {version} of model {name!r} of tenant {tenant!r}")
        return render(request, "version.html", page, v=detail)

    @app.get("/models/{tenant}/{name}/{version}/onnx")
    def download_onnx(
        request: Request, tenant: TenantName, name: ModelName, version: Version
    ) -> Response:
        page = _reader(request)
        main = _main(request)
        check_name("model", name)
        onnx = main.models.onnx(_as_tenant(_tenant_id(main, tenant), page), name, version)
        return Response(
            onnx,
            media_type="application/octet-stream",
            headers={"content-disposition": attachment(f"{tenant}-{name}-v{version}.onnx")},
        )

    @app.post("/models/{tenant}/{name}/{version}/delete")
    def delete_version(
        request: Request,
        tenant: TenantName,
        name: ModelName,
        version: Version,
        csrf: CsrfField = "",
    ) -> Response:
        page = _writer(request, csrf)
        _operators(request).delete_model(_operator(request, page), tenant, name, version)
        return RedirectResponse(f"{PREFIX}/models?tenant={tenant}", status_code=303)

    @app.get("/audit")
    def audit_page(
        request: Request,
        actor: Annotated[str, Query(max_length=80)] = "",
        action: Annotated[str, Query(max_length=32)] = "",
        tenant: Annotated[str, Query(max_length=64)] = "",
        since: Annotated[str, Query(max_length=32)] = "",
        until: Annotated[str, Query(max_length=32)] = "",
        cursor: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    ) -> HTMLResponse:
        page = _reader(request)
        filters = {"actor": actor, "action": action, "tenant": tenant}
        filters |= {"since": since, "until": until}
        query = AuditQuery(
            actor or None,
            action or None,
            tenant or None,
            _moment("since", since),
            _moment("until", until),
            cursor,
            AUDIT_PAGE,
        )
        listed = _main(request).audit.page(query)
        return render(request, "audit.html", page, listed=listed, filters=filters)

    def _suspend(request: Request, name: str, csrf: str, suspended: bool) -> Response:
        page = _writer(request, csrf)
        _operators(request).suspend(_operator(request, page), name, suspended)
        return RedirectResponse(f"{PREFIX}/tenants/{name}", status_code=303)


def _set_cookie(
    request: Request, response: Response, name: str, value: str, max_age: int | None = None
) -> None:
    """A console cookie: the console's path only, never read by scripts or sent cross-site,
    over https only where configured (`cookie_secure`)."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=_main(request).settings.cookie_secure,
        path=PREFIX,
    )


def _login_page(request: Request, render: Any, error: str | None, status: int) -> HTMLResponse:
    token = secrets.token_urlsafe(24)
    response: HTMLResponse = render(request, "login.html", None, status, error=error, csrf=token)
    _set_cookie(request, response, LOGIN_COOKIE, token, max_age=3600)
    return response


def _tenant_page(
    request: Request,
    render: Any,
    page: Page,
    name: str,
    error: ServiceError | None = None,
    form_name: str = "",
    submitted: dict[str, Any] | None = None,
    notice: str | None = None,
) -> HTMLResponse:
    main = _main(request)
    info = _tenant_info(main, name)
    rules = main.policies.show(name)
    policy = rules.policy_json()
    denied = sorted(set(REGISTRY.names()) - set(policy["allowed_ops"]))
    response: HTMLResponse = render(
        request,
        "tenant.html",
        page,
        400 if error else 200,
        info=info,
        rules=rules,
        policy=policy,
        denied=denied,
        quota=_quota_values(rules.quota),
        policy_fields=POLICY_LABELS,
        signing=rules.signing.to_json(),
        signing_fingerprints=[fingerprint_of_pem(k) for k in rules.signing.trust.keys],
        models=main.console_queries.models(name, 1),
        rejections=main.uploads.rejections(name)[:5],
        error=error,
        error_field=_field_of(error),
        form_name=form_name,
        submitted=submitted or {},
        notice=notice,
    )
    return response


def _tenant_info(main: State, name: str) -> Any:
    for info in main.tenants.list_tenants():
        if info.tenant == name:
            return info
    raise NotFound(f"no tenant {name!r}")


def _tenant_id(main: State, tenant: str) -> str:
    tenant_id: str | None = main.console_queries.tenant_id(tenant)
    if tenant_id is None:
        raise NotFound(f"no tenant {tenant!r}")
    return tenant_id


# -- form values -------------------------------------------------------------------------------


def _policy_changes(
    form: Any, current: dict[str, Any], overrides: dict[str, Any]
) -> dict[str, Any]:
    """The policy fields the form changes. Ops are edited as the ones *denied*: an empty list
    allows every registered op (the default)."""
    numeric = tuple(f for f in POLICY_FIELDS if f != "allowed_ops")
    changes = _field_changes(form, numeric, current, overrides)
    if "denied_ops" in form:
        denied = set(str(form["denied_ops"]).replace(",", " ").split())
        if unknown := sorted(denied - set(REGISTRY.names())):
            raise InvalidRules(f"denied_ops: expected registered op types, got {unknown[:5]}")
        allowed = sorted(set(REGISTRY.names()) - denied) if denied else None
        if allowed != overrides.get("allowed_ops"):
            changes["allowed_ops"] = allowed
    return changes


def _field_changes(
    form: Any, names: tuple[str, ...], current: dict[str, Any], overrides: dict[str, Any]
) -> dict[str, Any]:
    """Each named field whose submitted value differs from its current one: an empty field
    goes back to the default (None); text that is no number is passed on for the service to
    refuse with its "expected X, got Y"."""
    changes: dict[str, Any] = {}
    for name in names:
        if name not in form:
            continue
        raw = str(form[name]).strip()
        if not raw:
            if name in overrides:
                changes[name] = None
            continue
        value = _number(raw)
        if value != current.get(name):
            changes[name] = value
    return changes


def _signing_changes(form: Any, current: dict[str, Any]) -> dict[str, Any]:
    """The signing fields the form changes: a checkbox, two PEM texts (empty: none) and the
    identities one a line."""

    def text(name: str) -> str:  # a browser sends a textarea's lines ended with CRLF
        return str(form.get(name, "")).replace("\r\n", "\n").strip()

    submitted = {
        "require_signature": "require_signature" in form,
        "signing_keys": text("signing_keys"),
        "signing_ca": text("signing_ca"),
        "signing_identities": [
            line.strip() for line in text("signing_identities").splitlines() if line.strip()
        ],
    }
    now = {**current, "signing_keys": "\n".join(current["signing_keys"]).strip()}
    now["signing_ca"] = current["signing_ca"].strip()
    changes = {k: v for k, v in submitted.items() if v != now[k]}
    if changes.get("signing_keys") == "":
        changes["signing_keys"] = None  # none trusted: back to the default
    return changes


def _number(raw: str) -> Any:
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw


def _quota_values(quota: Any) -> dict[str, Any]:
    return {name: getattr(quota, name) for name in QUOTA_FIELDS}


def _field_of(error: ServiceError | None) -> str:
    """The form field an InvalidRules message names ("policy max_batch: expected ...")."""
    if error is None:
        return ""
    head = error.message.split(":", 1)[0].split()
    return head[-1] if head else ""


def _policy_notice(blocked: tuple[str, ...], unblocked: tuple[str, ...]) -> str:
    parts = ["Policy saved."]
    if blocked:
        parts.append(f"Blocked: {', '.join(blocked)}.")
    if unblocked:
        parts.append(f"Unblocked: {', '.join(unblocked)}.")
    return " ".join(parts)


def _moment(what: str, raw: str) -> datetime | None:
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise BadRequest(
            f"{what}: expected a time like 2026-01-31T12:00, got {raw!r:.40}"
        ) from None
    return utc_moment(what, moment)


def attachment(filename: str) -> str:
    """A Content-Disposition that names a download: the name as a quoted ASCII token (any
    other character replaced) and as RFC 5987 UTF-8, so no name can break the header."""
    plain = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in filename)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(filename, safe='')}"


def _size(value: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024  # type: ignore[assignment]
    return str(value)


def _readable(value: Any, name: str = "") -> str:
    """An audit detail's value for people: hashes shortened, lists and changes as text, byte
    and time fields with their units, nothing as Python's repr."""
    if value is None:
        return "none"
    if isinstance(value, str) and name.endswith("sha256"):
        return value[:12] + "…"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and name.endswith("_bytes"):
        return _size(value)
    if isinstance(value, int | float) and name.endswith("_us"):
        return f"{value} µs"
    if isinstance(value, int | float) and name.endswith("_s"):
        return f"{value} s"
    if isinstance(value, list):
        return ", ".join(_readable(v, name) for v in value) or "none"
    if isinstance(value, dict):
        return "; ".join(f"{k.replace('_', ' ')}: {_readable(v, k)}" for k, v in value.items())
    return str(value)[:200]


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


# -- errors as pages ---------------------------------------------------------------------------


def _error_pages(app: FastAPI, templates: Jinja2Templates) -> None:
    async def login_needed(_request: Request, _exc: Exception) -> Response:
        return RedirectResponse(f"{PREFIX}/login", status_code=303)

    async def domain_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ServiceError)
        status = status_of(exc)
        headers = (
            {"retry-after": str(exc.retry_after_s)} if isinstance(exc, TooManyRequests) else None
        )
        return templates.TemplateResponse(
            request,
            "error.html",
            {"page": None, "status": status, "code": exc.code, "message": exc.message},
            status_code=status,
            headers=headers,
        )

    async def bad_form(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"msg": "invalid request", "loc": ()}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return templates.TemplateResponse(
            request,
            "error.html",
            {
                "page": None,
                "status": 400,
                "code": "BAD_REQUEST",
                "message": f"{where}: {first['msg']}",
            },
            status_code=400,
        )

    app.add_exception_handler(LoginNeeded, login_needed)
    app.add_exception_handler(ServiceError, domain_error)
    app.add_exception_handler(RequestValidationError, bad_form)
