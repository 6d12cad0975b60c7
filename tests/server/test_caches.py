"""The in-memory key and model-lookup caches: this process's writes take effect at once, another
process's writes once the TTL runs out; and which request bodies decode on the event loop."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from executor import SessionOptions, compile
from server.cli.user import decode_infer_response, encode_infer_request
from server.db.engine import open_database
from server.errors import NotFound, Unauthorized
from server.main import create_app, database_location
from server.services import inference
from server.services.models import ModelService
from server.services.tenants import TenantService
from server.services.types import Principal
from server.settings import Settings
from server.storage import open_artifacts
from tests.support.api import ADMIN_TOKEN, assert_error, auth, new_tenant
from tests.support.backends import SettingsFactory
from tests.support.builders import Built, mlp
from tests.support.uploads import AFFINE, upload
from validator import validate

HOUR = 3600.0  # a TTL that never runs out in a test: only invalidation can explain a change
X = np.arange(8, dtype=np.float32).reshape(2, 4)
OTHER = mlp((4, 4)).built()  # same signature name `x`, different graph and outputs


class Clock:
    """A settable clock; `then` runs once at the next reading (a write that lands between a
    lookup's database read and its caching, which reads the clock)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.then: Callable[[], object] | None = None

    def __call__(self) -> float:
        if (write := self.then) is not None:
            self.then = None
            write()
        return self.now


@pytest.fixture
def cached_client(make_settings: SettingsFactory) -> Iterator[TestClient]:
    settings = make_settings(auth_cache_ttl_s=HOUR, model_lookup_ttl_s=HOUR)
    with TestClient(create_app(settings)) as c:
        yield c


def _infer(client: TestClient, key: str, name: str = "m", path: str = "") -> np.ndarray:
    body, headers = encode_infer_request({"x": X})
    response = client.post(
        f"/v2/models/{name}{path}/infer", content=body, headers=headers | auth(key)
    )
    assert response.status_code == 200, response.text
    (out,) = decode_infer_response(
        response.content, response.headers.get("Inference-Header-Content-Length")
    ).values()
    return out


def _local(built: Built) -> np.ndarray:
    compiled = compile(validate(built.program, built.params), SessionOptions(use_cuda=False))
    (out,) = compiled.run({"x": X}).values()
    return out


def _key_id(key: str) -> str:
    return key.split("_")[1]


# -- this process's writes: at once, whatever the TTL ---------------------------------------


def test_revoked_key_is_refused_by_the_very_next_request(cached_client: TestClient) -> None:
    key = new_tenant(cached_client, "tenant-a")
    upload(cached_client, key)
    _infer(cached_client, key)
    assert cached_client.app.state.tenants.cached_principal(key) is not None  # type: ignore[attr-defined]
    revoked = cached_client.delete(f"/v1/admin/keys/{_key_id(key)}", headers=auth(ADMIN_TOKEN))
    assert revoked.status_code == 200
    body, headers = encode_infer_request({"x": X})
    response = cached_client.post("/v2/models/m/infer", content=body, headers=headers | auth(key))
    assert_error(response, 401, "UNAUTHORIZED")
    assert_error(cached_client.get("/v2/models/m/ready", headers=auth(key)), 401, "UNAUTHORIZED")


def test_a_new_key_works_at_once_and_the_old_one_stays_until_revoked(
    cached_client: TestClient,
) -> None:
    old = new_tenant(cached_client, "tenant-a")
    upload(cached_client, old)
    _infer(cached_client, old)
    added = cached_client.post("/v1/admin/tenants/tenant-a/keys", headers=auth(ADMIN_TOKEN))
    new = added.json()["key"]
    np.testing.assert_array_equal(_infer(cached_client, new), _infer(cached_client, old))
    cached_client.delete(f"/v1/admin/keys/{_key_id(old)}", headers=auth(ADMIN_TOKEN))
    assert_error(cached_client.get("/v2/models/m/ready", headers=auth(old)), 401, "UNAUTHORIZED")
    assert cached_client.get("/v2/models/m/ready", headers=auth(new)).status_code == 200


def test_deleted_model_is_not_found_by_the_very_next_infer(cached_client: TestClient) -> None:
    key = new_tenant(cached_client, "tenant-a")
    upload(cached_client, key)
    _infer(cached_client, key)
    assert cached_client.delete("/v1/models/m", headers=auth(key)).status_code == 204
    body, headers = encode_infer_request({"x": X})
    response = cached_client.post("/v2/models/m/infer", content=body, headers=headers | auth(key))
    assert_error(response, 404, "NOT_FOUND")


def test_deleted_version_is_not_found_and_latest_falls_back(cached_client: TestClient) -> None:
    key = new_tenant(cached_client, "tenant-a")
    upload(cached_client, key)
    upload(cached_client, key, built=OTHER)
    np.testing.assert_array_equal(_infer(cached_client, key), _local(OTHER))
    np.testing.assert_array_equal(_infer(cached_client, key, path="/versions/2"), _local(OTHER))
    assert cached_client.delete("/v1/models/m/versions/2", headers=auth(key)).status_code == 204
    body, headers = encode_infer_request({"x": X})
    pinned = "/v2/models/m/versions/2/infer"
    assert_error(
        cached_client.post(pinned, content=body, headers=headers | auth(key)), 404, "NOT_FOUND"
    )
    np.testing.assert_array_equal(_infer(cached_client, key), _local(AFFINE))
    ready = cached_client.get("/v2/models/m/ready", headers=auth(key)).json()
    assert ready["version"] == "1"


def test_new_upload_is_the_latest_from_the_next_request(cached_client: TestClient) -> None:
    key = new_tenant(cached_client, "tenant-a")
    upload(cached_client, key)
    np.testing.assert_array_equal(_infer(cached_client, key), _local(AFFINE))
    assert upload(cached_client, key, built=OTHER)["version"] == 2
    np.testing.assert_array_equal(_infer(cached_client, key), _local(OTHER))
    assert cached_client.get("/v2/models/m", headers=auth(key)).json()["versions"] == ["2"]


def test_a_name_deleted_and_uploaded_again_serves_the_new_graph(
    cached_client: TestClient,
) -> None:
    """The new model's first version is 1 again: the old compiled version 1 must be gone."""
    key = new_tenant(cached_client, "tenant-a")
    upload(cached_client, key)
    np.testing.assert_array_equal(_infer(cached_client, key, path="/versions/1"), _local(AFFINE))
    cached_client.delete("/v1/models/m", headers=auth(key))
    assert upload(cached_client, key, built=OTHER)["version"] == 1
    np.testing.assert_array_equal(_infer(cached_client, key, path="/versions/1"), _local(OTHER))
    np.testing.assert_array_equal(_infer(cached_client, key), _local(OTHER))


def test_cached_lookups_stay_inside_the_tenant(cached_client: TestClient) -> None:
    key_a = new_tenant(cached_client, "tenant-a")
    key_b = new_tenant(cached_client, "tenant-b")
    upload(cached_client, key_a)
    _infer(cached_client, key_a)  # tenant A's lookup of "m" is cached now
    for path in ("/v2/models/m", "/v2/models/m/ready", "/v2/models/m/versions/1/ready"):
        assert_error(cached_client.get(path, headers=auth(key_b)), 404, "NOT_FOUND")
    body, headers = encode_infer_request({"x": X})
    response = cached_client.post("/v2/models/m/infer", content=body, headers=headers | auth(key_b))
    assert_error(response, 404, "NOT_FOUND")
    assert_error(
        cached_client.get("/v2/models/m/ready", headers=auth(ADMIN_TOKEN)), 403, "FORBIDDEN"
    )


# -- another process's writes: once the TTL runs out ----------------------------------------


def _two_replicas(
    settings: Settings, ttl_s: float, clock: Clock
) -> tuple[TenantService, TenantService, ModelService, ModelService]:
    """Two sets of services on one database and artifact store, as two replicas would be."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    sessions = open_database(database_location(settings))
    artifacts = open_artifacts(settings.artifacts_url, settings.data_dir)
    return (
        TenantService(sessions, cache_ttl_s=ttl_s, clock=clock),
        TenantService(sessions, cache_ttl_s=ttl_s, clock=clock),
        ModelService(sessions, artifacts, lookup_ttl_s=ttl_s, clock=clock),
        ModelService(sessions, artifacts, lookup_ttl_s=ttl_s, clock=clock),
    )


def test_another_replicas_revocation_is_seen_once_the_ttl_runs_out(settings: Settings) -> None:
    clock = Clock()
    here, there, _, _ = _two_replicas(settings, 5.0, clock)
    key = here.create_tenant("tenant-a").key
    assert here.authenticate(key).tenant_id
    there.revoke_key(_key_id(key))
    with pytest.raises(Unauthorized):
        there.authenticate(key)
    clock.now += 4.9
    assert here.authenticate(key).key_id == _key_id(key)  # still within the TTL
    clock.now += 0.2
    assert here.cached_principal(key) is None
    with pytest.raises(Unauthorized):
        here.authenticate(key)


def test_another_replicas_delete_and_upload_are_seen_once_the_ttl_runs_out(
    settings: Settings,
) -> None:
    clock = Clock()
    tenants, _, here, there = _two_replicas(settings, 5.0, clock)
    tenant_id = tenants.authenticate(tenants.create_tenant("tenant-a").key).tenant_id
    caller = Principal(tenant_id=tenant_id, key_id="k", is_admin=False)
    here.upload(caller, "m", AFFINE.program, AFFINE.params)
    assert here.resolve(caller, "m", None).version == 1
    there.upload(caller, "m", OTHER.program, OTHER.params)
    assert here.resolve(caller, "m", None).version == 1  # within the TTL
    clock.now += 5.1
    assert here.resolve(caller, "m", None).version == 2
    there.delete(caller, "m")
    clock.now += 5.1
    assert here.cached_resolve(caller, "m", None) is None
    with pytest.raises(NotFound):
        here.resolve(caller, "m", None)


def test_a_revocation_during_a_key_check_is_not_cached_over(settings: Settings) -> None:
    clock = Clock()
    tenants, _, _, _ = _two_replicas(settings, HOUR, clock)
    key = tenants.create_tenant("tenant-a").key
    clock.then = lambda: tenants.revoke_key(_key_id(key))
    assert tenants.authenticate(key).key_id == _key_id(key)  # read before the revocation
    assert clock.then is None and tenants.cached_principal(key) is None
    with pytest.raises(Unauthorized):
        tenants.authenticate(key)


def test_an_upload_during_a_model_lookup_is_not_cached_over(settings: Settings) -> None:
    clock = Clock()
    tenants, _, models, _ = _two_replicas(settings, HOUR, clock)
    caller = tenants.authenticate(tenants.create_tenant("tenant-a").key)
    models.upload(caller, "m", AFFINE.program, AFFINE.params)
    clock.then = lambda: models.upload(caller, "m", OTHER.program, OTHER.params)
    assert models.resolve(caller, "m", None).version == 1  # read before the upload
    assert clock.then is None and models.cached_resolve(caller, "m", None) is None
    assert models.resolve(caller, "m", None).version == 2


def test_ttl_zero_turns_the_caches_off(settings: Settings) -> None:
    clock = Clock()
    here, there, models_here, _ = _two_replicas(settings, 0.0, clock)
    key = here.create_tenant("tenant-a").key
    caller = here.authenticate(key)
    assert here.cached_principal(key) is None
    there.revoke_key(_key_id(key))
    with pytest.raises(Unauthorized):
        here.authenticate(key)
    models_here.upload(caller, "m", AFFINE.program, AFFINE.params)
    assert models_here.resolve(caller, "m", None).version == 1
    assert models_here.cached_resolve(caller, "m", None) is None


def test_a_wrong_secret_for_a_cached_key_id_is_refused(settings: Settings) -> None:
    here, _, _, _ = _two_replicas(settings, HOUR, Clock())
    key = here.create_tenant("tenant-a").key
    here.authenticate(key)
    forged = key[:-4] + ("aaaa" if not key.endswith("aaaa") else "bbbb")
    assert here.cached_principal(forged) is None
    with pytest.raises(Unauthorized):
        here.authenticate(forged)


# -- which request bodies decode on the event loop ---------------------------------------------


def test_only_small_uncompressed_bodies_decode_inline() -> None:
    small = b"{}" * 100
    assert inference.decodes_cheaply(small, {"Content-Type": "application/json"})
    assert inference.decodes_cheaply(small, {"Content-Encoding": "identity"})
    assert not inference.decodes_cheaply(gzip.compress(small), {"Content-Encoding": "gzip"})
    assert not inference.decodes_cheaply(gzip.compress(small), {"content-encoding": "GZIP "})
    too_big = b" " * (inference.INLINE_MAX_BODY_BYTES + 1)
    assert not inference.decodes_cheaply(too_big, {})


def test_inline_and_threadpool_decodes_answer_alike(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        key = new_tenant(client, "tenant-a")
        upload(client, key, built=OTHER)
        np.testing.assert_array_equal(_infer(client, key), _local(OTHER))
        body, headers = encode_infer_request({"x": X[:, :3]})  # wrong width: typed 400
        response = client.post("/v2/models/m/infer", content=body, headers=headers | auth(key))
        assert response.status_code == 400, response.text
        assert set(response.json()) == {"error", "code"}
        packed = gzip.compress(encode_infer_request({"x": X})[0])
        gz_headers = encode_infer_request({"x": X})[1] | {"Content-Encoding": "gzip"}
        response = client.post("/v2/models/m/infer", content=packed, headers=gz_headers | auth(key))
        assert response.status_code == 200, response.text
