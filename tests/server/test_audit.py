"""The audit log: one row for every kind of state change, with its actor, and no key material."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from server.errors import Unauthorized
from tests.support.api import ADMIN_TOKEN, auth
from tests.support.builders import Built, conv
from tests.support.uploads import post_upload

ADMIN = auth(ADMIN_TOKEN)


def test_every_state_change_is_audited_once_without_key_material(client: TestClient) -> None:
    state = client.app.state  # type: ignore[attr-defined]
    created = client.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN).json()
    tenant_key = created["key"]
    second = client.post("/v1/admin/tenants/acme/keys", headers=ADMIN).json()
    alice_key = client.post(
        "/v1/admin/admins", json={"name": "alice", "role": "admin"}, headers=ADMIN
    ).json()["key"]
    alice = auth(alice_key)
    cnn = conv().built()
    assert post_upload(client, tenant_key, "cnn", cnn).status_code == 201
    assert post_upload(client, tenant_key, "bad", Built(b"junk", None)).status_code == 422
    no_conv = [
        op
        for op in client.get("/v1/admin/tenants/acme/policy", headers=alice).json()["policy"][
            "allowed_ops"
        ]
        if op != "conv2d"
    ]
    assert (
        client.put(
            "/v1/admin/tenants/acme/policy", json={"allowed_ops": no_conv}, headers=alice
        ).status_code
        == 200
    )
    assert (
        client.put(
            "/v1/admin/tenants/acme/policy", json={"allowed_ops": None}, headers=alice
        ).status_code
        == 200
    )
    assert (
        client.put(
            "/v1/admin/tenants/acme/quota", json={"max_models": 5}, headers=alice
        ).status_code
        == 200
    )
    assert client.post("/v1/admin/tenants/acme/suspend", headers=alice).status_code == 200
    assert client.post("/v1/admin/tenants/acme/resume", headers=alice).status_code == 200
    assert client.delete("/v1/models/cnn", headers=auth(tenant_key)).status_code == 204
    assert client.delete(f"/v1/admin/keys/{second['key_id']}", headers=alice).status_code == 200
    state.admins.login(alice_key, "req-1", "10.0.0.1")
    with pytest.raises(Unauthorized):
        state.admins.login(tenant_key, "req-2", "10.0.0.2")  # tenant keys never log in
    assert client.delete("/v1/admin/admins/alice", headers=ADMIN).status_code == 200

    entries = client.get("/v1/admin/audit?limit=500", headers=ADMIN).json()["entries"]
    rows = {(e["action"], e["outcome"], e["actor"], e["target"]) for e in entries}
    tenant_actor = "tenant:acme"
    expected = {
        ("tenant.create", "ok", "admin:root", "acme"),
        ("key.create", "ok", "admin:root", created["key_id"]),
        ("key.create", "ok", "admin:root", second["key_id"]),
        ("admin.create", "ok", "admin:root", "alice"),
        ("model.upload", "ok", tenant_actor, "cnn/1"),
        ("model.upload", "rejected", tenant_actor, "bad"),
        ("policy.set", "ok", "admin:alice", "acme"),
        ("model.block", "ok", "admin:alice", "cnn/1"),
        ("model.unblock", "ok", "admin:alice", "cnn/1"),
        ("quota.set", "ok", "admin:alice", "acme"),
        ("tenant.suspend", "ok", "admin:alice", "acme"),
        ("tenant.resume", "ok", "admin:alice", "acme"),
        ("model.delete", "ok", tenant_actor, "cnn"),
        ("key.revoke", "ok", "admin:alice", second["key_id"]),
        ("login", "ok", "admin:alice", "alice"),
        ("login", "denied", "admin:anonymous", None),
        ("admin.revoke", "ok", "admin:root", "alice"),
    }
    assert expected <= rows
    for action, outcome, actor, target in expected - {("policy.set", "ok", "admin:alice", "acme")}:
        matching = [
            e
            for e in entries
            if (e["action"], e["outcome"], e["actor"], e["target"])
            == (action, outcome, actor, target)
        ]
        assert len(matching) == 1, (action, target)
    assert len([e for e in entries if e["action"] == "policy.set"]) == 2

    accepted = next(e for e in entries if e["action"] == "model.upload" and e["outcome"] == "ok")
    assert accepted["detail"]["program_sha256"] == hashlib.sha256(cnn.program).hexdigest()
    assert accepted["detail"]["params_sha256"] == hashlib.sha256(cnn.params or b"").hexdigest()
    assert accepted["key_id"] == created["key_id"] and accepted["tenant"] == "acme"
    rejected = next(e for e in entries if e["outcome"] == "rejected")
    assert rejected["detail"]["diagnostic_codes"]  # the codes, never the bytes
    login = next(e for e in entries if e["action"] == "login" and e["outcome"] == "ok")
    assert (login["request_id"], login["client"]) == ("req-1", "10.0.0.1")
    assert all(e["request_id"] for e in entries)

    _assert_no_key_material(state, [ADMIN_TOKEN, tenant_key, second["key"], alice_key])


def _assert_no_key_material(state: Any, keys: list[str]) -> None:
    """Every column of every audit row, scanned for each key, its secret and its hash prefix."""
    needles: list[str] = []
    for key in keys:
        secret = key.split("_", 2)[2] if key.startswith("gg_") else key
        needles += [key, secret, hashlib.sha256(secret.encode()).hexdigest()[:16]]
    engine = state.audit._sessions.kw["bind"]
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT * FROM audit_log")).all()
    assert rows
    for row in rows:
        for value in row:
            for needle in needles:
                assert needle not in str(value)
