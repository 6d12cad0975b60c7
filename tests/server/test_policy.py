"""Per-tenant policy and quotas through the app: upload, check and inference enforce them."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import ADMIN_TOKEN, auth
from tests.support.builders import affine, conv
from tests.support.uploads import AFFINE, post_check, post_upload

CNN = conv().built()
ADMIN = auth(ADMIN_TOKEN)


def infer_affine(client: TestClient, key: str, name: str) -> Any:
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    return client.post(f"/v2/models/{name}/infer", json=body, headers=auth(key))


def set_policy(client: TestClient, tenant: str, **changes: Any) -> dict[str, Any]:
    response = client.put(f"/v1/admin/tenants/{tenant}/policy", json=changes, headers=ADMIN)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def set_quota(client: TestClient, tenant: str, **changes: Any) -> None:
    response = client.put(f"/v1/admin/tenants/{tenant}/quota", json=changes, headers=ADMIN)
    assert response.status_code == 200, response.text


def all_ops_but(client: TestClient, tenant: str, op: str) -> list[str]:
    policy = client.get(f"/v1/admin/tenants/{tenant}/policy", headers=ADMIN).json()["policy"]
    ops: list[str] = policy["allowed_ops"]
    assert op in ops  # the default: every registered op
    return [o for o in ops if o != op]


def test_forbidden_op_blocks_stored_version_rejects_upload_and_check(
    client: TestClient, key_a: str, key_b: str
) -> None:
    assert post_upload(client, key_a, "cnn", CNN).status_code == 201
    assert post_upload(client, key_a, "lin", AFFINE).status_code == 201
    assert post_upload(client, key_b, "cnn", CNN).status_code == 201

    change = set_policy(client, "tenant-a", allowed_ops=all_ops_but(client, "tenant-a", "conv2d"))
    assert change["blocked"] == ["cnn/1"] and change["unblocked"] == []
    assert "conv2d" not in change["policy"]["allowed_ops"]

    x = [0.5] * (3 * 16 * 16)
    cnn_body = {
        "inputs": [{"name": "image", "shape": [1, 3, 16, 16], "datatype": "FP32", "data": x}]
    }
    blocked = client.post("/v2/models/cnn/infer", json=cnn_body, headers=auth(key_a))
    assert blocked.status_code == 409, blocked.text
    assert blocked.json()["code"] == "MODEL_BLOCKED_BY_POLICY"
    # Another tenant's policy is its own.
    assert (
        client.post("/v2/models/cnn/infer", json=cnn_body, headers=auth(key_b)).status_code == 200
    )
    assert infer_affine(client, key_a, "lin").status_code == 200

    listed = client.get("/v1/models/cnn", headers=auth(key_a)).json()
    assert [v["status"] for v in listed["versions"]] == ["blocked"]

    refused = post_upload(client, key_a, "cnn2", CNN)
    assert refused.status_code == 422
    body = refused.json()
    assert body["code"] == "OP_NOT_ALLOWED_BY_POLICY"
    assert body["error"] == "op conv2d is not allowed for tenant tenant-a"
    assert any(d["code"] == "OP_NOT_ALLOWED" for d in body["diagnostics"])
    checked = post_check(client, key_a, CNN)
    assert (checked.status_code, checked.json()["code"]) == (422, "OP_NOT_ALLOWED_BY_POLICY")
    assert post_check(client, key_b, CNN).status_code == 200

    loosened = set_policy(client, "tenant-a", allowed_ops=None)
    assert loosened["unblocked"] == ["cnn/1"] and loosened["blocked"] == []
    assert (
        client.post("/v2/models/cnn/infer", json=cnn_body, headers=auth(key_a)).status_code == 200
    )


def test_limit_field_named_in_rejection(client: TestClient, key_a: str) -> None:
    set_policy(client, "tenant-a", max_ops=1)
    refused = post_upload(client, key_a, "cnn", CNN)
    assert refused.status_code == 422
    assert refused.json()["code"] == "OVER_TENANT_POLICY"
    assert "max_ops" in refused.json()["error"]


def test_flops_limit_tightened_then_loosened(client: TestClient, key_a: str) -> None:
    set_policy(client, "tenant-a", max_flops_per_sample=1)
    assert post_upload(client, key_a, "m", AFFINE).json()["code"] == "OVER_TENANT_POLICY"
    set_policy(client, "tenant-a", max_flops_per_sample=10**12)
    assert post_upload(client, key_a, "m", AFFINE).status_code == 201
    assert infer_affine(client, key_a, "m").status_code == 200


def test_model_and_version_quotas(client: TestClient, key_a: str) -> None:
    set_quota(client, "tenant-a", max_models=1, max_versions=2)
    assert post_upload(client, key_a, "m", AFFINE).status_code == 201
    other = post_upload(client, key_a, "n", AFFINE)
    assert (other.status_code, other.json()["code"]) == (403, "QUOTA_EXCEEDED")
    assert "max_models" in other.json()["error"]
    assert post_upload(client, key_a, "m", AFFINE).status_code == 201  # same model: allowed
    third = post_upload(client, key_a, "m", AFFINE)
    assert (third.status_code, third.json()["code"]) == (403, "QUOTA_EXCEEDED")
    assert "max_versions" in third.json()["error"]


def test_storage_quota(client: TestClient, key_a: str) -> None:
    assert post_upload(client, key_a, "m", AFFINE).status_code == 201
    tenant_id = client.app.state.tenants.authenticate(key_a).tenant_id  # type: ignore[attr-defined]
    used = client.app.state.policies.storage_bytes(tenant_id)  # type: ignore[attr-defined]
    assert used > len(AFFINE.program)  # program, params and ONNX
    set_quota(client, "tenant-a", max_storage_bytes=used)
    # the same bytes under another name add nothing: the quota counts distinct artifacts
    assert post_upload(client, key_a, "same", AFFINE).status_code == 201
    refused = post_upload(client, key_a, "n", affine(5).built())
    assert (refused.status_code, refused.json()["code"]) == (413, "STORAGE_QUOTA")
    error = refused.json()["error"]
    assert "quota max_storage_bytes" in error and "for tenant tenant-a" in error, error
    set_quota(client, "tenant-a", max_storage_bytes=None)  # back to the default: off
    assert post_upload(client, key_a, "n", AFFINE).status_code == 201


def test_concurrent_uploads_quota(client: TestClient, key_a: str, key_b: str) -> None:
    set_quota(client, "tenant-a", max_concurrent_uploads=1)
    compiles = client.app.state.limits.compiles  # type: ignore[attr-defined]
    tenant_id = client.app.state.tenants.authenticate(key_a).tenant_id  # type: ignore[attr-defined]
    with compiles.slots.slot(tenant_id):  # one upload compiling
        refused = post_upload(client, key_a, "m", AFFINE)
        assert (refused.status_code, refused.json()["code"]) == (429, "TOO_MANY_COMPILES")
        assert "expected at most 1 uploads, checks and model loads" in refused.json()["error"]
        assert refused.headers["retry-after"] == "1"
        # the server's default (4) still applies to every other tenant
        assert post_upload(client, key_b, "m", AFFINE).status_code == 201
    assert post_upload(client, key_a, "m", AFFINE).status_code == 201
    set_quota(client, "tenant-a", max_concurrent_uploads=None)  # back to the default (4)
    with compiles.slots.slot(tenant_id):
        assert post_upload(client, key_a, "m", AFFINE).status_code == 201


def test_rate_quota_per_tenant(client: TestClient, key_a: str, key_b: str) -> None:
    set_quota(client, "tenant-a", rate_per_s=0.001, burst=2)
    statuses = [client.get("/v1/models", headers=auth(key_a)).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert all(client.get("/v1/models", headers=auth(key_b)).status_code == 200 for _ in range(5))


def test_suspended_tenant_refused_everywhere_until_resumed(
    client: TestClient, key_a: str, key_b: str
) -> None:
    assert post_upload(client, key_a, "m", AFFINE).status_code == 201
    assert client.post("/v1/admin/tenants/tenant-a/suspend", headers=ADMIN).status_code == 200
    for response in (
        client.get("/v1/models", headers=auth(key_a)),
        post_upload(client, key_a, "n", AFFINE),
        post_check(client, key_a, AFFINE),
        infer_affine(client, key_a, "m"),
        client.get("/v2/models/m", headers=auth(key_a)),
    ):
        assert (response.status_code, response.json()["code"]) == (403, "TENANT_SUSPENDED")
    assert client.get("/v1/models", headers=auth(key_b)).status_code == 200
    assert client.post("/v1/admin/tenants/tenant-a/resume", headers=ADMIN).status_code == 200
    assert infer_affine(client, key_a, "m").status_code == 200


def test_rules_survive_a_restart(client: TestClient, key_a: str, settings: Any) -> None:
    from server.main import create_app

    set_policy(client, "tenant-a", max_batch=3)
    with TestClient(create_app(settings)) as again:
        shown = again.get("/v1/admin/tenants/tenant-a/policy", headers=ADMIN).json()
    assert shown["policy"]["max_batch"] == 3 and shown["policy_overrides"] == {"max_batch": 3}
