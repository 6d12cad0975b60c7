"""Signed uploads through the app: verified in the compile worker against the tenant's trust,
refused with their codes, kept with their signer and shown wherever a version is shown.
Bundles are signed here with the real `model_signing` library (keys and a throwaway CA)."""

from __future__ import annotations

import base64
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import ADMIN_TOKEN, auth
from tests.support.builders import affine, conv
from tests.support.signing_material import (
    KeyPair,
    ec_key_pair,
    issue_leaf,
    make_ca,
    now,
    sign_with_certificate,
    sign_with_key,
)

ADMIN = auth(ADMIN_TOKEN)
AFFINE = affine().built()
CNN = conv().built()
PROGRAM, PARAMS = "model.pdmodel", "model.pdiparams"
FILES = {PROGRAM: AFFINE.program, PARAMS: AFFINE.params}
KEY = ec_key_pair()
CA = make_ca()
EMAIL = "build@tenant-a.example"


def set_policy(client: TestClient, tenant: str, **changes: Any) -> dict[str, Any]:
    answer = client.put(f"/v1/admin/tenants/{tenant}/policy", json=changes, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def upload(
    client: TestClient,
    key: str,
    name: str,
    files: dict[str, bytes | None],
    signature: bytes | None = None,
    *,
    path: str = "/v1/models",
) -> Any:
    """`files` by the names they are uploaded under: the program first, then the params."""
    (program_name, program), *rest = files.items()
    parts: dict[str, Any] = {"program": (program_name, program)}
    if rest and rest[0][1] is not None:
        parts["params"] = (rest[0][0], rest[0][1])
    if signature is not None:
        parts["signature"] = ("model.sig", signature)
    data = {"name": name} if path == "/v1/models" else {}
    return client.post(path, data=data, files=parts, headers=auth(key))


def refused(answer: Any, code: str) -> str:
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == code, answer.text
    message: str = answer.json()["error"]
    return message


def audit_of(client: TestClient, action: str = "model.upload") -> list[dict[str, Any]]:
    page = client.get(f"/v1/admin/audit?action={action}&tenant=tenant-a", headers=ADMIN)
    entries: list[dict[str, Any]] = page.json()["entries"]
    return entries


@pytest.fixture
def trusting_a_key(client: TestClient, key_a: str) -> str:
    set_policy(client, "tenant-a", signing_keys=KEY.public_pem)
    return key_a


def test_a_signed_upload_keeps_and_shows_its_signer(
    client: TestClient, trusting_a_key: str, tmp_path: Path
) -> None:
    key = trusting_a_key
    answer = upload(client, key, "m", FILES, sign_with_key(KEY, FILES, tmp_path))
    assert answer.status_code == 201, answer.text
    signed = {"method": "key", "signer": KEY.fingerprint, "key_fingerprint": KEY.fingerprint}
    assert answer.json()["provenance"] == signed
    assert answer.json()["report"]["inputs"][0]["name"] == "x"

    model = client.get("/v1/models/m", headers=auth(key)).json()
    assert model["provenance"] == signed and model["versions"][0]["provenance"] == signed
    listed = client.get("/v1/models", headers=auth(key)).json()["models"]
    assert listed[0]["provenance"] == signed
    metadata = client.get("/v2/models/m", headers=auth(key)).json()
    assert metadata["parameters"]["signed_by"] == KEY.fingerprint
    assert metadata["parameters"]["signing_key_fingerprint"] == KEY.fingerprint
    assert metadata["parameters"]["signing_method"] == "key"
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    assert client.post("/v2/models/m/infer", json=body, headers=auth(key)).status_code == 200

    stored = audit_of(client)[0]
    assert (stored["outcome"], stored["target"]) == ("ok", "m/1")
    assert stored["detail"]["signer"] == KEY.fingerprint
    assert stored["detail"]["key_fingerprint"] == KEY.fingerprint

    # An unsigned upload next to it (signatures are not required): stored, shown unsigned.
    unsigned = upload(client, key, "m", FILES)
    assert unsigned.status_code == 201 and unsigned.json()["provenance"] is None
    versions = client.get("/v1/models/m", headers=auth(key)).json()["versions"]
    assert [v["provenance"] for v in versions] == [signed, None]
    assert "signed_by" not in client.get("/v2/models/m", headers=auth(key)).json().get(
        "parameters", {}
    )


def test_the_console_version_page_shows_the_signer(
    client: TestClient, trusting_a_key: str, tmp_path: Path
) -> None:
    bundle = sign_with_key(KEY, FILES, tmp_path)
    assert upload(client, trusting_a_key, "m", FILES, bundle).status_code == 201
    assert upload(client, trusting_a_key, "m", FILES).status_code == 201
    login = client.get("/admin/login").text
    token = re.search(r'name="csrf" value="([^"]+)"', login)
    assert token is not None
    client.post("/admin/login", data={"key": ADMIN_TOKEN, "csrf": token.group(1)})
    signed_page = client.get("/admin/models/tenant-a/m/1").text
    assert "Provenance" in signed_page and KEY.fingerprint in signed_page
    assert "Uploaded unsigned." in client.get("/admin/models/tenant-a/m/2").text


@pytest.mark.parametrize("changed", [PROGRAM, PARAMS])
def test_one_changed_byte_is_refused_naming_the_file(
    client: TestClient, trusting_a_key: str, tmp_path: Path, changed: str
) -> None:
    bundle = sign_with_key(KEY, FILES, tmp_path)
    tampered = dict(FILES)
    data = bytearray(tampered[changed] or b"")
    data[-1] ^= 0x01
    tampered[changed] = bytes(data)
    message = refused(upload(client, trusting_a_key, "m", tampered, bundle), "SIGNATURE_MISMATCH")
    assert message.startswith(f"{changed}: expected sha256 ")
    assert client.get("/v1/models/m", headers=auth(trusting_a_key)).status_code == 404

    entry = audit_of(client)[0]
    assert entry["outcome"] == "rejected"
    assert (entry["detail"]["code"], entry["detail"]["file"]) == ("SIGNATURE_MISMATCH", changed)
    kept = client.get("/v1/admin/tenants/tenant-a/rejections", headers=ADMIN).json()
    assert kept["rejections"][0]["code"] == "SIGNATURE_MISMATCH"
    assert kept["rejections"][0]["diagnostics"][0]["message"] == message


def test_a_signature_over_another_file_set_is_refused(
    client: TestClient, trusting_a_key: str, tmp_path: Path
) -> None:
    with_readme = sign_with_key(KEY, {**FILES, "README.md": b"notes"}, tmp_path / "more")
    message = refused(upload(client, trusting_a_key, "m", FILES, with_readme), "SIGNATURE_MISMATCH")
    assert "README.md" in message
    # The right bytes under other names than the signed ones.
    renamed = {"inference.pdmodel": AFFINE.program, "inference.pdiparams": AFFINE.params}
    signed_as_model = sign_with_key(KEY, FILES, tmp_path / "renamed")
    message = refused(
        upload(client, trusting_a_key, "m", renamed, signed_as_model), "SIGNATURE_MISMATCH"
    )
    assert message.startswith("inference.pdmodel: ")
    # Another model's files under the signed names.
    other = {PROGRAM: CNN.program, PARAMS: CNN.params}
    signed_affine = sign_with_key(KEY, FILES, tmp_path / "other")
    assert refused(
        upload(client, trusting_a_key, "m", other, signed_affine), "SIGNATURE_MISMATCH"
    ).startswith(f"{PROGRAM}: ")


def test_a_signature_by_another_key_is_untrusted(
    client: TestClient, trusting_a_key: str, tmp_path: Path
) -> None:
    stranger: KeyPair = ec_key_pair()
    bundle = sign_with_key(stranger, FILES, tmp_path)
    refused(upload(client, trusting_a_key, "m", FILES, bundle), "SIGNER_UNTRUSTED")
    # Another tenant's key is not this tenant's trust either.
    key_b = client.post("/v1/admin/tenants", json={"name": "tenant-b"}, headers=ADMIN).json()
    set_policy(client, "tenant-b", signing_keys=stranger.public_pem)
    own = upload(client, key_b["key"], "m", FILES, bundle)
    assert own.status_code == 201, own.text


def test_a_tenant_that_trusts_nobody_refuses_a_signed_upload(
    client: TestClient, key_a: str, tmp_path: Path
) -> None:
    bundle = sign_with_key(KEY, FILES, tmp_path)
    refused(upload(client, key_a, "m", FILES, bundle), "SIGNER_UNTRUSTED")


def test_certificates_an_allowed_identity_another_one_and_an_expired_leaf(
    client: TestClient, key_a: str, tmp_path: Path
) -> None:
    set_policy(client, "tenant-a", signing_ca=CA.pem, signing_identities=[EMAIL])
    leaf = issue_leaf(CA, EMAIL)
    bundle = sign_with_certificate(leaf, [CA], FILES, tmp_path / "ok")
    answer = upload(client, key_a, "m", FILES, bundle)
    assert answer.status_code == 201, answer.text
    assert answer.json()["provenance"] == {
        "method": "certificate",
        "signer": EMAIL,
        "key_fingerprint": leaf.key.fingerprint,
    }

    intern = issue_leaf(CA, "intern@tenant-a.example", common_name="intern")
    bundle = sign_with_certificate(intern, [CA], FILES, tmp_path / "intern")
    message = refused(upload(client, key_a, "m", FILES, bundle), "SIGNER_UNTRUSTED")
    assert "intern@tenant-a.example" in message
    assert audit_of(client)[0]["detail"]["signer"] == "CN=intern"  # audited with its signer

    expired = issue_leaf(
        CA, EMAIL, valid_from=now() - timedelta(days=9), valid_until=now() - timedelta(days=2)
    )
    bundle = sign_with_certificate(expired, [CA], FILES, tmp_path / "expired")
    refused(upload(client, key_a, "m", FILES, bundle), "CERTIFICATE_EXPIRED")
    future = issue_leaf(CA, EMAIL, valid_from=now() + timedelta(days=2))
    bundle = sign_with_certificate(future, [CA], FILES, tmp_path / "future")
    refused(upload(client, key_a, "m", FILES, bundle), "CERTIFICATE_NOT_YET_VALID")

    rogue = make_ca("rogue")
    bundle = sign_with_certificate(issue_leaf(rogue, EMAIL), [rogue], FILES, tmp_path / "rogue")
    refused(upload(client, key_a, "m", FILES, bundle), "SIGNER_UNTRUSTED")
    versions = client.get("/v1/models/m", headers=auth(key_a)).json()["versions"]
    assert len(versions) == 1


def test_an_unsigned_upload_or_check_while_required_is_refused(
    client: TestClient, trusting_a_key: str, tmp_path: Path
) -> None:
    set_policy(client, "tenant-a", require_signature=True)
    refused(upload(client, trusting_a_key, "m", FILES), "SIGNATURE_MISSING")
    refused(upload(client, trusting_a_key, "", FILES, path="/v1/check"), "SIGNATURE_MISSING")
    assert audit_of(client)[0]["detail"]["code"] == "SIGNATURE_MISSING"
    bundle = sign_with_key(KEY, FILES, tmp_path)
    assert upload(client, trusting_a_key, "m", FILES, bundle).status_code == 201


def test_check_verifies_the_signature_and_stores_nothing(
    client: TestClient, trusting_a_key: str, tmp_path: Path
) -> None:
    bundle = sign_with_key(KEY, FILES, tmp_path)
    checked = upload(client, trusting_a_key, "", FILES, bundle, path="/v1/check")
    assert checked.status_code == 200, checked.text
    assert checked.json()["provenance"]["signer"] == KEY.fingerprint
    assert checked.json()["valid"] is True
    tampered = {PROGRAM: AFFINE.program + b"\x00", PARAMS: AFFINE.params}
    refused(
        upload(client, trusting_a_key, "", tampered, bundle, path="/v1/check"),
        "SIGNATURE_MISMATCH",
    )
    assert client.get("/v1/models", headers=auth(trusting_a_key)).json()["models"] == []


def test_a_50_mb_or_deeply_nested_bundle_is_refused_not_a_500(
    client: TestClient, trusting_a_key: str, tmp_path: Path
) -> None:
    huge = b'{"mediaType": "' + b"a" * (50 * 2**20) + b'"}'
    message = refused(upload(client, trusting_a_key, "m", FILES, huge), "SIGNATURE_MALFORMED")
    assert "at most 1.0 MiB, got 50.0 MiB" in message
    nested = b"[" * 400_000 + b"]" * 400_000
    assert "nested too deep" in refused(
        upload(client, trusting_a_key, "m", FILES, nested), "SIGNATURE_MALFORMED"
    )
    # Nested deep inside the signed payload, within the size cap.
    bundle = json.loads(sign_with_key(KEY, FILES, tmp_path))
    payload = b'{"predicate": ' + b"[" * 300_000 + b"]" * 300_000 + b"}"
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    assert "nested too deep" in refused(
        upload(client, trusting_a_key, "m", FILES, json.dumps(bundle).encode()),
        "SIGNATURE_MALFORMED",
    )
    refused(upload(client, trusting_a_key, "m", FILES, b"\x00" * 1024), "SIGNATURE_MALFORMED")
    # The service is fine afterwards.
    assert upload(client, trusting_a_key, "m", FILES).status_code == 201


def test_requiring_signatures_blocks_unsigned_versions_and_revoking_a_key_its_own(
    client: TestClient, trusting_a_key: str, tmp_path: Path
) -> None:
    key = trusting_a_key
    assert upload(client, key, "plain", FILES).status_code == 201
    bundle = sign_with_key(KEY, FILES, tmp_path / "signed")
    assert upload(client, key, "signed", FILES, bundle).status_code == 201

    change = set_policy(client, "tenant-a", require_signature=True)
    assert (change["blocked"], change["unblocked"]) == (["plain/1"], [])
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    blocked = client.post("/v2/models/plain/infer", json=body, headers=auth(key))
    assert (blocked.status_code, blocked.json()["code"]) == (409, "MODEL_BLOCKED_BY_POLICY")
    assert client.post("/v2/models/signed/infer", json=body, headers=auth(key)).status_code == 200
    listed = client.get("/v1/models/plain", headers=auth(key)).json()["versions"]
    assert [v["status"] for v in listed] == ["blocked"]
    assert [e["target"] for e in audit_of(client, "model.block")] == ["plain/1"]

    # The key is revoked (a leak): what it signed is blocked too; trusted again, served again.
    other = ec_key_pair()
    change = set_policy(client, "tenant-a", signing_keys=other.public_pem)
    assert change["blocked"] == ["signed/1"]
    change = set_policy(client, "tenant-a", signing_keys=[other.public_pem, KEY.public_pem])
    assert change["unblocked"] == ["signed/1"]

    change = set_policy(client, "tenant-a", require_signature=False)
    assert change["unblocked"] == ["plain/1"]
    assert client.post("/v2/models/plain/infer", json=body, headers=auth(key)).status_code == 200
