"""Operator REST: named admins and viewers, roles, validation codes, audit paging, OpenAPI."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import ADMIN_TOKEN, assert_error, auth, new_tenant
from tests.support.builders import affine
from tests.support.uploads import post_upload

ADMIN = auth(ADMIN_TOKEN)


def create_admin(client: TestClient, name: str, role: str) -> str:
    response = client.post("/v1/admin/admins", json={"name": name, "role": role}, headers=ADMIN)
    assert response.status_code == 201, response.text
    key: str = response.json()["key"]
    return key


def test_root_and_named_admins_listed_without_secrets(client: TestClient) -> None:
    create_admin(client, "alice", "admin")
    viewer_key = create_admin(client, "vera", "viewer")
    listed = client.get("/v1/admin/admins", headers=ADMIN).json()["admins"]
    assert [(a["name"], a["role"]) for a in listed] == [
        ("alice", "admin"),
        ("root", "admin"),
        ("vera", "viewer"),
    ]
    assert viewer_key.split("_")[1] in listed[2]["key_ids"]
    assert viewer_key not in str(listed)


def test_viewer_reads_every_admin_route_and_changes_nothing(client: TestClient) -> None:
    new_tenant(client, "acme")
    viewer = auth(create_admin(client, "vera", "viewer"))
    for path in (
        "/v1/admin/tenants",
        "/v1/admin/admins",
        "/v1/admin/tenants/acme/policy",
        "/v1/admin/tenants/acme/quota",
        "/v1/admin/tenants/acme/rejections",
        "/v1/admin/audit",
        "/v1/admin/audit.jsonl",
        "/v1/openapi.json",
    ):
        assert client.get(path, headers=viewer).status_code == 200, path
    for method, path, body in (
        ("POST", "/v1/admin/tenants", {"name": "evil"}),
        ("POST", "/v1/admin/tenants/acme/keys", None),
        ("DELETE", "/v1/admin/keys/0123456789abcdef", None),
        ("POST", "/v1/admin/admins", {"name": "eve", "role": "admin"}),
        ("DELETE", "/v1/admin/admins/root", None),
        ("PUT", "/v1/admin/tenants/acme/policy", {"max_batch": 1}),
        ("PUT", "/v1/admin/tenants/acme/quota", {"max_models": 1}),
        ("POST", "/v1/admin/tenants/acme/suspend", None),
        ("POST", "/v1/admin/tenants/acme/resume", None),
    ):
        response = client.request(method, path, json=body, headers=viewer)
        assert_error(response, 403, "ADMIN_ROLE_REQUIRED")
    assert [
        t["tenant"] for t in client.get("/v1/admin/tenants", headers=ADMIN).json()["tenants"]
    ] == ["acme"]


def test_named_admin_acts_and_is_revoked(client: TestClient) -> None:
    alice = auth(create_admin(client, "alice", "admin"))
    assert client.post("/v1/admin/tenants", json={"name": "acme"}, headers=alice).status_code == 201
    assert client.delete("/v1/admin/admins/alice", headers=ADMIN).status_code == 200
    assert_error(client.get("/v1/admin/tenants", headers=alice), 401, "UNAUTHORIZED")


def test_tenant_keys_are_refused_on_every_admin_route(client: TestClient, key_a: str) -> None:
    for path in ("/v1/admin/admins", "/v1/admin/audit", "/v1/admin/tenants/tenant-a/policy"):
        assert_error(client.get(path, headers=auth(key_a)), 403, "FORBIDDEN")


def test_validation_errors_have_codes(client: TestClient) -> None:
    new_tenant(client, "acme")
    cases = (
        ("/v1/admin/admins", "POST", {"name": "Bad Name", "role": "admin"}, 400, "INVALID_NAME"),
        ("/v1/admin/admins", "POST", {"name": "x", "role": "owner"}, 400, "INVALID_NAME"),
        ("/v1/admin/tenants/acme/policy", "PUT", {"max_batch": 0}, 400, "INVALID_POLICY"),
        ("/v1/admin/tenants/acme/policy", "PUT", {"allowed_ops": ["rm_rf"]}, 400, "INVALID_POLICY"),
        ("/v1/admin/tenants/acme/policy", "PUT", {"max_loop_trips": -1}, 400, "INVALID_POLICY"),
        ("/v1/admin/tenants/acme/policy", "PUT", {"max_batch": "big"}, 400, "BAD_REQUEST"),
        ("/v1/admin/tenants/acme/quota", "PUT", {"burst": 0}, 400, "INVALID_POLICY"),
        ("/v1/admin/tenants/acme/quota", "PUT", {"rate_per_s": -1}, 400, "INVALID_POLICY"),
        ("/v1/admin/tenants/nobody/policy", "GET", None, 404, "NOT_FOUND"),
        ("/v1/admin/tenants/nobody/quota", "PUT", {"burst": 2}, 404, "NOT_FOUND"),
        ("/v1/admin/admins/nobody", "DELETE", None, 404, "NOT_FOUND"),
        ("/v1/admin/audit?limit=0", "GET", None, 400, "BAD_REQUEST"),
        ("/v1/admin/audit?since=yesterday", "GET", None, 400, "BAD_REQUEST"),
    )
    for path, method, body, status, code in cases:
        assert_error(client.request(method, path, json=body, headers=ADMIN), status, code)
    assert (
        "expected"
        in client.put("/v1/admin/tenants/acme/policy", json={"max_batch": 0}, headers=ADMIN).json()[
            "error"
        ]
    )
    create_admin(client, "alice", "admin")
    duplicate = client.post(
        "/v1/admin/admins", json={"name": "alice", "role": "admin"}, headers=ADMIN
    )
    assert_error(duplicate, 409, "CONFLICT")


def test_audit_paging_and_filters(client: TestClient) -> None:
    for i in range(5):
        new_tenant(client, f"t{i}")
    seen: list[int] = []
    cursor: int | None = None
    while True:
        query = "action=tenant.create&limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = client.get(f"/v1/admin/audit?{query}", headers=ADMIN).json()
        seen += [e["id"] for e in page["entries"]]
        assert all(e["action"] == "tenant.create" for e in page["entries"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 5 and seen == sorted(seen, reverse=True)
    by_tenant = client.get("/v1/admin/audit?tenant=t3", headers=ADMIN).json()["entries"]
    assert {e["action"] for e in by_tenant} == {"tenant.create", "key.create"}
    assert all(e["actor"] == "admin:root" for e in by_tenant)
    future = client.get("/v1/admin/audit?since=2999-01-01T00:00:00Z", headers=ADMIN).json()
    assert future["entries"] == []
    lines = client.get("/v1/admin/audit.jsonl?actor=admin:root", headers=ADMIN).text.splitlines()
    assert len(lines) == 10  # 5 tenants, 5 first keys


def test_rejections_kept_newest_first_and_capped(client: TestClient, settings: Any) -> None:
    key = new_tenant(client, "acme")
    client.put("/v1/admin/tenants/acme/policy", json={"max_ops": 1}, headers=ADMIN)
    built = affine().built()
    keep = settings.rejections_kept
    for i in range(keep + 2):
        response = post_upload(client, key, f"m{i}", built)
        assert response.status_code == 422
    kept = client.get("/v1/admin/tenants/acme/rejections", headers=ADMIN).json()["rejections"]
    assert len(kept) == keep
    assert kept[0]["name"] == f"m{keep + 1}" and kept[-1]["name"] == "m2"
    assert kept[0]["code"] == "OVER_TENANT_POLICY"
    assert any(d["code"] == "TOO_MANY_OPS" for d in kept[0]["diagnostics"])


def test_openapi_documents_the_control_plane(client: TestClient, key_a: str) -> None:
    assert_error(client.get("/v1/openapi.json"), 401, "UNAUTHORIZED")
    doc = client.get("/v1/openapi.json", headers=auth(key_a)).json()
    paths = doc["paths"]
    assert all(path.startswith("/v1/") for path in paths)
    for path in (
        "/v1/models",
        "/v1/check",
        "/v1/admin/tenants",
        "/v1/admin/tenants/{name}/policy",
        "/v1/admin/audit",
        "/v1/admin/admins",
    ):
        assert path in paths, path
    put_policy = paths["/v1/admin/tenants/{name}/policy"]["put"]
    body_ref = put_policy["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body_ref.endswith("/PolicyIn")
    ok_ref = put_policy["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ok_ref.endswith("/PolicyChangeOut")
    for status in ("401", "403", "404"):
        ref = put_policy["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorBody")
    assert "422" in paths["/v1/models"]["post"]["responses"]
    schemas = doc["components"]["schemas"]
    assert set(schemas["ErrorBody"]["required"]) == {"error", "code"}
    assert "allowed_ops" in schemas["PolicyIn"]["properties"]
