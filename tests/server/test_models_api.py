"""The /v1 model API and /v1/admin through the app: uploads, errors, isolation, restart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient
from pydantic import SecretStr

from server.http.deps import LoadedModelDep
from server.main import create_app
from server.services.types import Principal
from server.settings import Settings
from server.storage.artifacts import TMP_PREFIX
from tests.support.api import ADMIN_TOKEN, assert_error, auth, new_tenant
from tests.support.backends import SettingsFactory, database_bytes
from tests.support.uploads import AFFINE, post_check, upload


def test_upload_adds_versions_lists_gets_and_downloads(client: TestClient, key_a: str) -> None:
    first = upload(client, key_a)
    assert first["version"] == 1 and first["status"] == "ready"
    report = first["report"]
    assert isinstance(report, dict)
    assert report["inputs"] == [{"name": "x", "dtype": "float32", "dims": [-1, 4]}]
    assert upload(client, key_a)["version"] == 2

    listed = client.get("/v1/models", headers=auth(key_a)).json()["models"]
    assert [(m["name"], m["versions"], m["latest_version"]) for m in listed] == [("m", [1, 2], 2)]
    got = client.get("/v1/models/m", headers=auth(key_a)).json()
    assert [v["version"] for v in got["versions"]] == [1, 2]
    assert got["signature"]["outputs"] == [{"name": "y", "dtype": "float32", "dims": [-1, 4]}]
    assert got["versions"][0]["report"] == report

    onnx = client.get("/v1/models/m/versions/1/onnx", headers=auth(key_a))
    assert onnx.status_code == 200
    x = np.ones((2, 4), np.float32)
    (y,) = ort.InferenceSession(onnx.content, providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    assert y.shape == (2, 4)


def test_check_validates_without_storing(client: TestClient, key_a: str) -> None:
    response = post_check(client, key_a)
    assert response.status_code == 200
    assert response.json()["valid"] is True
    assert client.get("/v1/models", headers=auth(key_a)).json() == {"models": []}


def test_rejected_program_is_422_with_every_diagnostic(client: TestClient, key_a: str) -> None:
    for path in ("/v1/models", "/v1/check"):
        response = client.post(
            path, data={"name": "bad"}, files={"program": b"\xff\xff junk"}, headers=auth(key_a)
        )
        assert_error(response, 422, "VALIDATION_FAILED")
        diagnostics = response.json()["diagnostics"]
        assert diagnostics and diagnostics[0]["code"] == "PROGRAM_MALFORMED"
    assert client.get("/v1/models/bad", headers=auth(key_a)).status_code == 404


@pytest.mark.parametrize("name", ["A", "-x", "a/b", "x" * 65, "..", "a b", "é"])
def test_invalid_model_names_are_400(client: TestClient, key_a: str, name: str) -> None:
    response = client.post(
        "/v1/models", data={"name": name}, files={"program": AFFINE.program}, headers=auth(key_a)
    )
    assert_error(response, 400, "INVALID_NAME")


def test_missing_parts_are_400(client: TestClient, key_a: str) -> None:
    no_program = client.post("/v1/models", data={"name": "m"}, headers=auth(key_a))
    assert_error(no_program, 400, "BAD_REQUEST")
    assert "program" in no_program.json()["error"]
    no_name = client.post("/v1/models", files={"program": AFFINE.program}, headers=auth(key_a))
    assert_error(no_name, 400, "BAD_REQUEST")
    assert "name" in no_name.json()["error"]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (
            "multipart/form-data; boundary=xx",
            b'--xx\r\nContent-Disposition: form-data; name="name"\r\n\r\nab',
        ),
        ("multipart/form-data; boundary=xx", b"not multipart at all"),
        ("multipart/form-data", b"--xx\r\n\r\n"),
        ("application/json", b'{"name": "m"}'),
        (
            "multipart/form-data; boundary=xx",
            b"--xx\r\nContent-Disposition: form-data\r\n\r\nab\r\n--xx--\r\n",
        ),
    ],
    ids=["truncated", "garbage", "no-boundary", "json", "part-without-name"],
)
def test_malformed_multipart_is_400(
    client: TestClient, key_a: str, content_type: str, body: bytes
) -> None:
    headers = {**auth(key_a), "Content-Type": content_type}
    response = client.post("/v1/models", content=body, headers=headers)
    assert 400 <= response.status_code < 500
    assert set(response.json()) == {"error", "code"}
    assert client.get("/v1/models", headers=auth(key_a)).json() == {"models": []}


def test_uploads_over_the_cap_are_413(settings: Settings) -> None:
    settings.max_upload_bytes = 2048
    with TestClient(create_app(settings)) as client:
        key = new_tenant(client, "t")
        big = {"program": b"\0" * 4096}
        declared = client.post("/v1/models", data={"name": "m"}, files=big, headers=auth(key))
        assert_error(declared, 413, "PAYLOAD_TOO_LARGE")

        def chunks() -> object:  # no Content-Length: counted while streaming
            yield b'--xx\r\nContent-Disposition: form-data; name="program"; filename="p"\r\n\r\n'
            for _ in range(8):
                yield b"\0" * 1024

        headers = {**auth(key), "Content-Type": "multipart/form-data; boundary=xx"}
        streamed = client.post("/v1/models", content=chunks(), headers=headers)  # type: ignore[arg-type]
        assert_error(streamed, 413, "PAYLOAD_TOO_LARGE")
        assert client.get("/v1/models", headers=auth(key)).json() == {"models": []}


def test_deleting_versions_and_models(client: TestClient, key_a: str) -> None:
    upload(client, key_a)
    upload(client, key_a)
    assert client.delete("/v1/models/m/versions/1", headers=auth(key_a)).status_code == 204
    assert_error(client.get("/v1/models/m/versions/1/onnx", headers=auth(key_a)), 404, "NOT_FOUND")
    assert upload(client, key_a)["version"] == 3  # numbers are never reused
    assert client.delete("/v1/models/m", headers=auth(key_a)).status_code == 204
    assert_error(client.get("/v1/models/m", headers=auth(key_a)), 404, "NOT_FOUND")
    assert_error(client.delete("/v1/models/m", headers=auth(key_a)), 404, "NOT_FOUND")


# -- isolation and auth ------------------------------------------------------------------

TENANT_ROUTES = [
    ("GET", "/v1/models/m"),
    ("DELETE", "/v1/models/m/versions/1"),
    ("GET", "/v1/models/m/versions/1/onnx"),
    ("DELETE", "/v1/models/m"),
]
ADMIN_ROUTES = [
    ("GET", "/v1/admin/tenants"),
    ("POST", "/v1/admin/tenants"),
    ("POST", "/v1/admin/tenants/tenant-a/keys"),
    ("DELETE", "/v1/admin/keys/0123456789abcdef"),
]
ALL_ROUTES = [*TENANT_ROUTES, ("GET", "/v1/models"), ("POST", "/v1/models"), ("POST", "/v1/check")]


@pytest.mark.parametrize(("method", "path"), TENANT_ROUTES)
def test_another_tenants_model_is_404(
    client: TestClient, key_a: str, key_b: str, method: str, path: str
) -> None:
    upload(client, key_a)
    assert_error(client.request(method, path, headers=auth(key_b)), 404, "NOT_FOUND")
    assert client.get("/v1/models", headers=auth(key_b)).json() == {"models": []}
    assert client.get("/v1/models/m", headers=auth(key_a)).status_code == 200  # untouched


def test_another_tenants_model_does_not_resolve(client: TestClient, key_a: str, key_b: str) -> None:
    from server.errors import NotFound

    upload(client, key_a)
    models = client.app.state.models  # type: ignore[attr-defined]
    b = client.app.state.tenants.authenticate(key_b)  # type: ignore[attr-defined]
    with pytest.raises(NotFound):
        models.resolve(b, "m", None)


def test_same_name_in_two_tenants_is_two_models(client: TestClient, key_a: str, key_b: str) -> None:
    upload(client, key_a)
    upload(client, key_a)
    assert upload(client, key_b)["version"] == 1


@pytest.mark.parametrize(("method", "path"), ALL_ROUTES + ADMIN_ROUTES)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        auth("gg_0123456789abcdef_wrong"),
        auth("not-a-key"),
        auth(ADMIN_TOKEN + "x"),
    ],
    ids=["missing", "empty", "basic", "unknown-key", "junk", "wrong-admin"],
)
def test_missing_or_wrong_keys_are_401(
    client: TestClient, method: str, path: str, headers: dict[str, str]
) -> None:
    response = client.request(method, path, headers=headers)
    assert_error(response, 401, "UNAUTHORIZED")
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_revoked_keys_are_401_and_rotation_works(client: TestClient, key_a: str) -> None:
    admin = auth(ADMIN_TOKEN)
    second = client.post("/v1/admin/tenants/tenant-a/keys", headers=admin).json()["key"]
    key_id = key_a.split("_")[1]
    revoked = client.delete(f"/v1/admin/keys/{key_id}", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revoked"] is not None
    for method, path in ALL_ROUTES:
        assert_error(client.request(method, path, headers=auth(key_a)), 401, "UNAUTHORIZED")
    assert client.get("/v1/models", headers=auth(second)).status_code == 200


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
def test_tenant_keys_on_admin_routes_are_403(
    client: TestClient, key_a: str, method: str, path: str
) -> None:
    assert_error(client.request(method, path, headers=auth(key_a)), 403, "FORBIDDEN")


def test_admin_routes(client: TestClient, key_a: str) -> None:
    admin = auth(ADMIN_TOKEN)
    listed = client.get("/v1/admin/tenants", headers=admin).json()["tenants"]
    assert [(t["tenant"], [k["role"] for k in t["keys"]]) for t in listed] == [
        ("tenant-a", ["tenant"])
    ]
    again = client.post("/v1/admin/tenants", json={"name": "tenant-a"}, headers=admin)
    assert_error(again, 409, "CONFLICT")
    bad = client.post("/v1/admin/tenants", json={"name": "Bad Name"}, headers=admin)
    assert_error(bad, 400, "INVALID_NAME")
    assert_error(client.post("/v1/admin/tenants", json={}, headers=admin), 400, "BAD_REQUEST")
    assert_error(client.post("/v1/admin/tenants", content=b"{", headers=admin), 400, "BAD_REQUEST")
    assert_error(client.delete("/v1/admin/keys/nope", headers=admin), 404, "NOT_FOUND")
    assert_error(client.get("/v1/models", headers=admin), 403, "FORBIDDEN")


def test_keys_are_hashed_at_rest(client: TestClient, key_a: str, settings: Settings) -> None:
    database = database_bytes(settings)
    secret = key_a.split("_", 2)[2]
    assert secret.encode() not in database
    assert ADMIN_TOKEN.encode() not in database


# -- start-up and restart -------------------------------------------------------------------


def test_first_start_prints_an_admin_token_once(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(admin_token=None)
    with TestClient(create_app(settings)):
        pass
    printed = capsys.readouterr().err
    token = next(word for word in printed.split() if word.startswith("gg_"))
    with TestClient(create_app(settings)) as client:
        assert token not in capsys.readouterr().err  # shown once
        response = client.post("/v1/admin/tenants", json={"name": "t"}, headers=auth(token))
        assert response.status_code == 201
    assert token.encode() not in database_bytes(settings)


def test_weak_admin_token_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 32 characters"):
        Settings(data_dir=tmp_path, admin_token=SecretStr("short"))


def test_restart_keeps_models_versions_keys_and_outputs(settings: Settings) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with TestClient(create_app(settings)) as client:
        key = new_tenant(client, "t")
        upload(client, key)
        upload(client, key)
        before = client.get("/v1/models/m", headers=auth(key)).json()
        principal = client.app.state.tenants.authenticate(key)  # type: ignore[attr-defined]
        y1 = client.app.state.models.resolve(principal, "m", 1).compiled.run({"x": x})  # type: ignore[attr-defined]
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/models/m", headers=auth(key)).json() == before
        principal = client.app.state.tenants.authenticate(key)  # type: ignore[attr-defined]
        loaded = client.app.state.models.resolve(principal, "m", None)  # type: ignore[attr-defined]
        assert loaded.version == 2
        y2 = client.app.state.models.resolve(principal, "m", 1).compiled.run({"x": x})  # type: ignore[attr-defined]
    np.testing.assert_array_equal(y1["y"], y2["y"])


@pytest.mark.embedded_only
def test_start_sweeps_temporary_files(settings: Settings) -> None:
    shard = settings.data_dir / "artifacts" / "ab"
    shard.mkdir(parents=True)
    (shard / f"{TMP_PREFIX}deadbeef").write_bytes(b"half a model")
    with TestClient(create_app(settings)):
        pass
    assert list(shard.iterdir()) == []


def test_resolve_picks_the_latest_ready_version(client: TestClient, key_a: str) -> None:
    upload(client, key_a)
    upload(client, key_a)
    principal: Principal = client.app.state.tenants.authenticate(key_a)  # type: ignore[attr-defined]
    models = client.app.state.models  # type: ignore[attr-defined]
    assert models.resolve(principal, "m", None).version == 2
    assert models.resolve(principal, "m", 1).version == 1
    assert models.resolve(principal, "m", None) is models.resolve(principal, "m", None)  # cached


def test_concurrent_uploads_get_distinct_versions(client: TestClient, key_a: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        versions = sorted(pool.map(lambda _: upload(client, key_a)["version"], range(6)))
    assert versions == [1, 2, 3, 4, 5, 6]


def test_loaded_model_dependency_resolves_in_the_callers_tenant(
    settings: Settings,
) -> None:
    router = APIRouter()

    @router.get("/probe/{name}")
    @router.get("/probe/{name}/versions/{version}")
    def probe(model: LoadedModelDep) -> dict[str, object]:
        return {"name": model.name, "version": model.version}

    app = create_app(settings)
    app.include_router(router)
    with TestClient(app) as client:
        a, b = new_tenant(client, "a"), new_tenant(client, "b")
        upload(client, a)
        upload(client, a)
        assert client.get("/probe/m", headers=auth(a)).json() == {"name": "m", "version": 2}
        assert client.get("/probe/m/versions/1", headers=auth(a)).json()["version"] == 1
        assert_error(client.get("/probe/m/versions/7", headers=auth(a)), 404, "NOT_FOUND")
        assert_error(client.get("/probe/m/versions/x", headers=auth(a)), 400, "BAD_REQUEST")
        assert_error(client.get("/probe/m", headers=auth(b)), 404, "NOT_FOUND")
        assert_error(client.get("/probe/m"), 401, "UNAUTHORIZED")
