"""The operator's console in a real browser against a real `graphgate serve`.

One story, in order (each step needs the ones before): a bad key and a tenant key are refused,
an operator logs in, creates a tenant and a key (shown once), sees the tenant's uploads and
rejections, forbids conv2d (the stored CNN is blocked, the next upload refused), allows it again,
revokes the key, and finds every step in the audit log. Then CSRF, cookie flags, and a viewer.
Screenshots of every page at 1280 and 390 px go to the test's tmp folder (and to docs/console/
when GRAPHGATE_CONSOLE_SHOTS=docs).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx2
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.support.api import ADMIN_TOKEN, auth
from tests.support.builders import Built, conv
from tests.support.served import Server
from tests.support.uploads import post_model

ROOT = Path(__file__).resolve().parents[2]
CNN = conv().built()
WIDTHS = (1280, 390)


def _context(browser: Browser, width: int = 1280) -> BrowserContext:
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.on("page", lambda p: p.on("dialog", lambda d: d.accept()))
    return context


def _login(page: Page, server: Server, key: str) -> None:
    page.goto(f"{server.url}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login$"))
    page.get_by_label("Operator key").fill(key)
    page.get_by_role("button", name="Log in").click()


def _infer(server: Server, key: str, ok: int, bad: int) -> None:
    url = f"{server.url}/v2/models/cnn/infer"
    image = {"name": "image", "datatype": "FP32", "shape": [1, 3, 16, 16], "data": [0.5] * 768}
    wrong = {**image, "shape": [1, 3, 8, 8], "data": [0.5] * 192}
    for body, want in [*[(image, 200)] * ok, *[(wrong, 400)] * bad]:
        answer = httpx2.post(url, json={"inputs": [body]}, headers=auth(key), timeout=30)
        assert answer.status_code == want, answer.text


def _shoot(page: Page, out: Path, name: str) -> None:
    """The page at each width, into `out` (and docs/console/ at 1280 when asked)."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(out / f"{name}-{width}.png"), full_page=True)
        # Usable at a phone's width: nothing on the page scrolls it sideways.
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= width, f"{name} at {width} px: expected no sideways scroll, got {wide} px"
        if width == 1280 and os.environ.get("GRAPHGATE_CONSOLE_SHOTS") == "docs":
            page.screenshot(path=str(ROOT / "docs" / "console" / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_every_page_has_a_favicon(browser: Browser, server: Server) -> None:
    page = browser.new_page()
    page.goto(f"{server.url}/admin/login")
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    assert icon is not None
    answer = httpx2.get(f"{server.url}{icon}")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("image/svg")
    page.close()


def test_operator_story(browser: Browser, server: Server, tmp_path: Path) -> None:
    context = _context(browser)
    page = context.new_page()

    # A bad key is refused on the login form, and stays logged out.
    _login(page, server, "gg_0123456789abcdef_not-a-key")
    expect(page.get_by_role("alert")).to_contain_text("not an operator's key")
    _shoot(page, tmp_path, "login")

    _login(page, server, ADMIN_TOKEN)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    cookie = next(c for c in context.cookies() if c["name"] == "gg_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["secure"] is False  # GRAPHGATE_COOKIE_SECURE is unset on this http server

    # Create a tenant: its key is shown once, then never again.
    page.get_by_role("link", name="Tenants").click()
    page.get_by_label("Name").fill("acme")
    page.get_by_role("button", name="Create").click()
    key = page.get_by_label(re.compile("API key")).input_value()
    assert key.startswith("gg_")
    page.get_by_role("link", name="Continue to tenant acme").click()
    expect(page.get_by_role("heading", name=re.compile("Tenant acme"))).to_be_visible()
    assert key not in page.content()
    page.goto(f"{server.url}/admin/tenants")
    assert key not in page.content()

    # A tenant key cannot log in.
    other = _context(browser).new_page()
    _login(other, server, key)
    expect(other.get_by_role("alert")).to_contain_text("not an operator's key")
    other.context.close()

    # An upload through REST appears with its report; a rejected one with its diagnostics.
    assert post_model(server, key, "cnn", CNN).status_code == 201
    _infer(server, key, ok=12, bad=2)  # traffic for the overview's charts and top lists
    rejected = post_model(server, key, "junk", Built(b"\xff\xff junk", None))
    assert rejected.status_code == 422, rejected.text
    page.get_by_role("link", name="Models").click()
    page.get_by_label("Tenant").fill("acme")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("text=PROGRAM_MALFORMED").first).to_be_visible()
    page.get_by_role("link", name="v1").click()
    expect(page.get_by_role("heading", name=re.compile("cnn"))).to_be_visible()
    histogram = page.locator("table.histogram")
    expect(histogram).to_contain_text("conv2d")
    expect(histogram).to_contain_text("pool2d")
    expect(page.locator("dl.figures").first).to_contain_text("FLOPs per sample")
    _shoot(page, tmp_path, "version")

    # Forbid conv2d: the stored CNN is blocked, the next upload refused with the policy code.
    page.goto(f"{server.url}/admin/tenants/acme")
    page.get_by_label(re.compile("Ops not allowed")).fill("conv2d")
    page.get_by_role("button", name="Save policy").click()
    expect(page.get_by_role("status")).to_contain_text("Blocked: cnn/1")
    refused = post_model(server, key, "cnn", CNN)
    assert refused.status_code == 422 and refused.json()["code"] == "OP_NOT_ALLOWED_BY_POLICY"
    page.goto(f"{server.url}/admin/models?tenant=acme")
    expect(page.locator("ul.versions").first).to_contain_text("blocked")
    expect(page.locator("text=OP_NOT_ALLOWED_BY_POLICY").first).to_be_visible()
    _shoot(page, tmp_path, "models")

    # A bad value is shown next to its field, and nothing changes.
    page.goto(f"{server.url}/admin/tenants/acme")
    page.get_by_label("Max batch").fill("lots")
    page.get_by_role("button", name="Save policy").click()
    expect(page.locator("#policy-max_batch-error")).to_contain_text("expected an integer")
    expect(page.locator("#policy-max_batch-error")).to_contain_text("INVALID_POLICY")
    _shoot(page, tmp_path, "tenant")

    # Loosen it again: unblocked.
    page.goto(f"{server.url}/admin/tenants/acme")
    page.get_by_label(re.compile("Ops not allowed")).fill("")
    page.get_by_role("button", name="Save policy").click()
    expect(page.get_by_role("status")).to_contain_text("Unblocked: cnn/1")

    # Revoke the key: the API answers 401.
    key_id = key.split("_")[1]
    page.get_by_role("button", name=f"Revoke key {key_id}").click()
    expect(page.locator("table").first).to_contain_text("revoked")
    gone = httpx2.get(f"{server.url}/v1/models", headers=auth(key), timeout=10)
    assert gone.status_code == 401

    # The audit log has every one of those actions, in order, each with its actor.
    page.get_by_role("link", name="Audit").click()
    rows = page.locator("table.audit tbody tr")
    listed = [
        (
            r.locator("td").nth(1).inner_text(),
            r.locator("td").nth(2).inner_text(),
            r.locator("td").nth(5).inner_text(),
        )
        for r in rows.all()
    ][::-1]  # oldest first
    root, tenant = "admin:root", "tenant:acme"
    expected = [
        ("admin:anonymous", "login", "denied"),
        (root, "login", "ok"),
        (root, "tenant.create", "ok"),
        (root, "key.create", "ok"),
        ("admin:anonymous", "login", "denied"),
        (tenant, "model.upload", "ok"),
        (tenant, "model.upload", "rejected"),
        (root, "policy.set", "ok"),
        (root, "model.block", "ok"),
        (tenant, "model.upload", "rejected"),
        (root, "policy.set", "ok"),
        (root, "model.unblock", "ok"),
        (root, "key.revoke", "ok"),
    ]
    assert listed == expected
    _shoot(page, tmp_path, "audit")
    for name, path in (("overview", "/"), ("tenants", "/tenants")):
        page.goto(f"{server.url}/admin{path}")
        _shoot(page, tmp_path, name)
    page.goto(f"{server.url}/admin/")
    expect(page.locator("section.stats")).to_contain_text("14")  # requests in the last hour
    expect(page.get_by_role("table").nth(0)).to_contain_text("acme")  # top tenants
    assert len(list(tmp_path.glob("*.png"))) == 2 * 7

    # A form POST without the CSRF token is refused, whatever the session.
    answer = context.request.post(f"{server.url}/admin/tenants", form={"name": "sneaky"})
    assert answer.status == 403 and "CSRF_FAILED" in answer.text()
    # Logging out ends the session on the server: the old cookie no longer works.
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/admin/login$"))
    replay = httpx2.get(
        f"{server.url}/admin/tenants",
        cookies={"gg_session": cookie["value"]},
        follow_redirects=False,
        timeout=10,
    )
    assert replay.status_code == 303
    context.close()


def test_viewer_reads_every_page_and_changes_nothing(browser: Browser, server: Server) -> None:
    made = httpx2.post(
        f"{server.url}/v1/admin/admins",
        json={"name": "watcher", "role": "viewer"},
        headers=auth(ADMIN_TOKEN),
        timeout=10,
    )
    assert made.status_code == 201, made.text
    httpx2.post(
        f"{server.url}/v1/admin/tenants",
        json={"name": "seen"},
        headers=auth(ADMIN_TOKEN),
        timeout=10,
    )
    context = _context(browser)
    page = context.new_page()
    _login(page, server, made.json()["key"])
    for path in ("/", "/tenants", "/tenants/seen", "/models", "/audit"):
        response = page.goto(f"{server.url}/admin{path}")
        assert response is not None and response.status == 200, path
        headers = response.headers
        assert headers["content-security-policy"].startswith("default-src 'self'")
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"
    page.goto(f"{server.url}/admin/tenants/seen")
    expect(page.get_by_role("button", name="Save policy")).to_be_disabled()
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    for path, form in (
        ("/tenants", {"name": "viewer-made"}),
        ("/tenants/seen/suspend", {}),
        ("/tenants/seen/keys", {}),
        ("/tenants/seen/policy", {"denied_ops": "relu"}),
        ("/tenants/seen/quota", {"max_models": "1"}),
    ):
        answer = context.request.post(f"{server.url}/admin{path}", form={**form, "csrf": csrf})
        assert answer.status == 403, path
        assert "ADMIN_ROLE_REQUIRED" in answer.text(), path
    rules = httpx2.get(
        f"{server.url}/v1/admin/tenants/seen/policy", headers=auth(ADMIN_TOKEN), timeout=10
    ).json()
    assert rules["policy_overrides"] == {} and rules["quota_overrides"] == {}
    assert rules["suspended"] is None
    context.close()


@pytest.fixture(autouse=True)
def _docs_folder() -> None:
    if os.environ.get("GRAPHGATE_CONSOLE_SHOTS") == "docs":
        (ROOT / "docs" / "console").mkdir(parents=True, exist_ok=True)
