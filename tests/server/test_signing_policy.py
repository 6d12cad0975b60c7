"""The signing fields of a tenant's policy: set like the others (REST, console), checked when
set, audited, shown with the policy; each replica's reload reads them again."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import ADMIN_TOKEN, auth
from tests.support.signing_material import ec_key_pair, issue_leaf, make_ca

ADMIN = auth(ADMIN_TOKEN)
KEY = ec_key_pair()
OTHER_KEY = ec_key_pair()
CA = make_ca()


def put_policy(client: TestClient, tenant: str, **changes: Any) -> Any:
    return client.put(f"/v1/admin/tenants/{tenant}/policy", json=changes, headers=ADMIN)


def test_signing_fields_are_set_shown_reset_and_audited(client: TestClient, key_a: str) -> None:
    answer = put_policy(
        client,
        "tenant-a",
        require_signature=True,
        signing_keys=KEY.public_pem + OTHER_KEY.public_pem,  # one text, two keys
        signing_ca=CA.pem,
        signing_identities=["build@tenant-a.example"],
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["policy"]["require_signature"] is True
    assert body["policy"]["signing_keys"] == [KEY.public_pem, OTHER_KEY.public_pem]
    assert body["policy"]["signing_identities"] == ["build@tenant-a.example"]
    assert body["policy_overrides"]["signing_ca"].strip() == CA.pem.strip()
    assert body["policy"]["max_batch"] >= 1  # the op policy is still there, unchanged

    shown = client.get("/v1/admin/tenants/tenant-a/policy", headers=ADMIN).json()
    assert shown["policy"] == body["policy"]
    other = client.get("/v1/admin/tenants/tenant-b/policy", headers=ADMIN)
    assert other.status_code == 404  # not created: no tenant, no policy

    reset = put_policy(client, "tenant-a", signing_keys=None, require_signature=None).json()
    assert reset["policy"]["signing_keys"] == [] and reset["policy"]["require_signature"] is False
    assert "signing_keys" not in reset["policy_overrides"]
    assert reset["policy"]["signing_identities"] == ["build@tenant-a.example"]  # kept

    entries = client.get("/v1/admin/audit?action=policy.set", headers=ADMIN).json()["entries"]
    changes = [e["detail"]["changes"] for e in entries]
    assert {"signing_keys": None, "require_signature": None} in changes
    assert any(c.get("require_signature") is True for c in changes)


def test_a_key_or_ca_that_does_not_parse_is_a_400_with_its_code(
    client: TestClient, key_a: str
) -> None:
    truncated = KEY.public_pem[: len(KEY.public_pem) // 2] + "\n-----END PUBLIC KEY-----\n"
    for value in ["not a key", truncated, CA.pem, 12]:
        refused = put_policy(client, "tenant-a", signing_keys=value)
        if isinstance(value, int):  # not text: the request body itself is refused
            assert refused.status_code == 400 and refused.json()["code"] == "BAD_REQUEST"
            continue
        assert (refused.status_code, refused.json()["code"]) == (400, "INVALID_SIGNING_KEY")
        assert refused.json()["error"].startswith("signing_keys: expected ")
    for value in ["not a certificate", issue_leaf(CA).pem]:
        refused = put_policy(client, "tenant-a", signing_ca=value)
        assert (refused.status_code, refused.json()["code"]) == (400, "INVALID_SIGNING_CA")
    refused = put_policy(client, "tenant-a", signing_identities=["ok@x.example", ""])
    assert (refused.status_code, refused.json()["code"]) == (400, "INVALID_POLICY")
    # A refused change changes nothing, not even the fields of it that were fine.
    refused = put_policy(client, "tenant-a", require_signature=True, signing_keys="junk")
    assert refused.status_code == 400
    policy = client.get("/v1/admin/tenants/tenant-a/policy", headers=ADMIN).json()["policy"]
    assert policy["require_signature"] is False and policy["signing_keys"] == []


def test_a_viewer_cannot_change_the_signing_policy(client: TestClient, key_a: str) -> None:
    viewer = client.post("/v1/admin/admins", json={"name": "eve", "role": "viewer"}, headers=ADMIN)
    refused = client.put(
        "/v1/admin/tenants/tenant-a/policy",
        json={"require_signature": True},
        headers=auth(viewer.json()["key"]),
    )
    assert (refused.status_code, refused.json()["code"]) == (403, "ADMIN_ROLE_REQUIRED")


def _console_login(client: TestClient, key: str = ADMIN_TOKEN) -> None:
    form = client.get("/admin/login").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    answer = client.post(
        "/admin/login", data={"key": key, "csrf": token.group(1)}, follow_redirects=False
    )
    assert answer.status_code == 303, answer.text


def _console_csrf(client: TestClient, tenant: str) -> str:
    page = client.get(f"/admin/tenants/{tenant}").text
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None
    return token.group(1)


def test_the_console_sets_the_signing_fields(client: TestClient, key_a: str) -> None:
    _console_login(client)
    csrf = _console_csrf(client, "tenant-a")
    # A browser ends a textarea's lines with CRLF.
    form = {
        "csrf": csrf,
        "require_signature": "on",
        "signing_keys": KEY.public_pem.replace("\n", "\r\n"),
        "signing_ca": "",
        "signing_identities": "build@tenant-a.example\r\nCN=release\r\n",
    }
    page = client.post("/admin/tenants/tenant-a/signing", data=form)
    assert page.status_code == 200, page.text
    assert "Policy saved." in page.text
    assert KEY.fingerprint in page.text
    policy = client.get("/v1/admin/tenants/tenant-a/policy", headers=ADMIN).json()["policy"]
    assert policy["require_signature"] is True
    assert policy["signing_keys"] == [KEY.public_pem]
    assert policy["signing_identities"] == ["build@tenant-a.example", "CN=release"]

    refused = client.post(
        "/admin/tenants/tenant-a/signing", data={**form, "signing_keys": "not a key"}
    )
    assert refused.status_code == 400
    assert "INVALID_SIGNING_KEY" in refused.text and 'aria-invalid="true"' in refused.text

    # Saved again unchanged: nothing to change, so no field is sent to the service.
    entries_before = client.get("/v1/admin/audit?action=policy.set", headers=ADMIN).json()
    client.post("/admin/tenants/tenant-a/signing", data=form)
    entries_after = client.get("/v1/admin/audit?action=policy.set", headers=ADMIN).json()
    assert entries_after["entries"][0]["detail"]["changes"] == {}
    assert len(entries_after["entries"]) == len(entries_before["entries"]) + 1

    unchecked = {k: v for k, v in form.items() if k != "require_signature"}
    client.post("/admin/tenants/tenant-a/signing", data=unchecked)
    policy = client.get("/v1/admin/tenants/tenant-a/policy", headers=ADMIN).json()["policy"]
    assert policy["require_signature"] is False and policy["signing_keys"] == [KEY.public_pem]


def test_a_viewer_cannot_use_the_console_signing_form(client: TestClient, key_a: str) -> None:
    viewer = client.post("/v1/admin/admins", json={"name": "eve", "role": "viewer"}, headers=ADMIN)
    _console_login(client, viewer.json()["key"])
    page = client.get("/admin/tenants/tenant-a").text
    assert "Save signing" in page and 'name="require_signature" value="on" disabled' in page
    form = {"csrf": _console_csrf(client, "tenant-a"), "require_signature": "on"}
    refused = client.post("/admin/tenants/tenant-a/signing", data=form)
    assert refused.status_code == 403 and "ADMIN_ROLE_REQUIRED" in refused.text
    policy = client.get("/v1/admin/tenants/tenant-a/policy", headers=ADMIN).json()["policy"]
    assert policy["require_signature"] is False
