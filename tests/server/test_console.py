"""The console's session rules over the ASGI app: cookie flags, expiry, revocation, throttled
logins, hashed session ids; and the per-minute ring behind the overview's charts."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import text

import server.main
from server.db.engine import create
from server.main import create_app, database_location
from server.services.metrics import RING_BOUNDS, MinuteRing
from server.settings import Settings
from server.storage.artifacts import Artifacts
from tests.support.api import ADMIN_TOKEN, auth
from tests.support.backends import SettingsFactory
from tests.support.builders import affine, mlp
from tests.support.uploads import upload_files


def _settings(tmp_path: Path, **values: object) -> Settings:
    base = Settings(data_dir=tmp_path / "data", admin_token=SecretStr(ADMIN_TOKEN))
    return base.model_copy(update=values)


def _login(client: TestClient, key: str) -> tuple[int, str]:
    form = client.get("/admin/login").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    answer = client.post(
        "/admin/login", data={"key": key, "csrf": token.group(1)}, follow_redirects=False
    )
    return answer.status_code, answer.headers.get("set-cookie", "")


def test_secure_cookie_when_configured_and_id_stored_hashed(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(cookie_secure=True)
    app = create_app(settings)
    with TestClient(app, base_url="https://testserver") as client:  # Secure: https only
        form_cookie = client.get("/admin/login").headers["set-cookie"]
        status, cookie = _login(client, ADMIN_TOKEN)
    assert status == 303
    for set_cookie in (form_cookie, cookie):  # the login form's CSRF cookie, then the session's
        flags = [part.strip().lower() for part in set_cookie.split(",")[0].split(";")]
        assert {"secure", "httponly", "samesite=strict", "path=/admin"} <= set(flags), flags
    session_id = cookie.split(";")[0].split("=", 1)[1]
    engine = create(database_location(settings))
    with engine.connect() as db:
        stored = [row[0] for row in db.execute(text("select id_hash from console_sessions"))]
    engine.dispose()
    assert len(stored) == 1 and session_id not in stored[0] and len(stored[0]) == 64


def test_idle_session_expires(make_settings: SettingsFactory) -> None:
    with TestClient(create_app(make_settings(console_idle_s=0.5))) as client:
        assert _login(client, ADMIN_TOKEN)[0] == 303
        assert client.get("/admin/tenants", follow_redirects=False).status_code == 200
        time.sleep(1.2)
        expired = client.get("/admin/tenants", follow_redirects=False)
        assert expired.status_code == 303 and expired.headers["location"] == "/admin/login"


def test_revoking_an_operator_ends_its_sessions(make_settings: SettingsFactory) -> None:
    with TestClient(create_app(make_settings())) as client:
        made = client.post(
            "/v1/admin/admins", json={"name": "ops", "role": "admin"}, headers=auth(ADMIN_TOKEN)
        )
        assert made.status_code == 201
        assert _login(client, made.json()["key"])[0] == 303
        assert client.get("/admin/", follow_redirects=False).status_code == 200
        revoked = client.delete("/v1/admin/admins/ops", headers=auth(ADMIN_TOKEN))
        assert revoked.status_code == 200
        assert client.get("/admin/", follow_redirects=False).status_code == 303


def test_failed_logins_are_rate_limited_and_audited(make_settings: SettingsFactory) -> None:
    with TestClient(create_app(make_settings(console_login_attempts=2))) as client:
        assert _login(client, "wrong-key-1")[0] == 401
        assert _login(client, "wrong-key-2")[0] == 401
        status, _ = _login(client, ADMIN_TOKEN)  # even the right key waits
        assert status == 429
        page = client.get("/admin/login")
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        answer = client.post("/admin/login", data={"key": "x", "csrf": token.group(1)})
        assert answer.status_code == 429 and "LOGIN_RATE_LIMITED" in answer.text
        assert int(answer.headers["retry-after"]) >= 1
        audit = client.get("/v1/admin/audit?action=login", headers=auth(ADMIN_TOKEN)).json()
    outcomes = [e["outcome"] for e in audit["entries"]]
    assert outcomes == ["denied", "denied"]
    assert all("wrong-key" not in str(e) for e in audit["entries"])


def test_login_without_its_form_token_is_refused(make_settings: SettingsFactory) -> None:
    with TestClient(create_app(make_settings())) as client:
        answer = client.post("/admin/login", data={"key": ADMIN_TOKEN}, follow_redirects=False)
    assert answer.status_code == 403 and "CSRF_FAILED" in answer.text
    assert "set-cookie" not in answer.headers


def test_minute_ring_counts_and_percentiles() -> None:
    now = [600.0]
    ring = MinuteRing(clock=lambda: now[0])
    for i in range(100):
        ring.record(0.001 if i < 98 else 0.5, failed=i >= 95)
    now[0] += 60
    ring.record(0.002, failed=False)
    points = ring.last_hour()
    assert len(points) == 60 and points[-1].start == 660.0
    previous, latest = points[-2], points[-1]
    assert (previous.requests, previous.errors) == (100, 5)
    assert previous.p50_s is not None and 0.001 <= previous.p50_s <= 0.001 * 1.25
    assert previous.p99_s is not None and 0.5 <= previous.p99_s <= 0.5 * 1.25
    assert latest.requests == 1 and points[0].requests == 0 and points[0].p50_s is None
    now[0] += 3600  # an hour later every slot is stale
    assert sum(p.requests for p in ring.last_hour()) == 0
    assert RING_BOUNDS[-1] > 60


def test_overview_shows_each_loaded_session_with_its_provider_and_memory(
    make_settings: SettingsFactory,
) -> None:
    built = affine().built()
    with TestClient(create_app(make_settings(workers=2))) as client:
        key = client.post("/v1/admin/tenants", json={"name": "acme"}, headers=auth(ADMIN_TOKEN))
        tenant = auth(key.json()["key"])
        files = upload_files(built)
        created = client.post("/v1/models", data={"name": "lin"}, files=files, headers=tenant)
        assert created.status_code == 201, created.text
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
        assert client.post("/v2/models/lin/infer", json=body, headers=tenant).status_code == 200
        onnx = client.get("/v1/models/lin/versions/1/onnx", headers=tenant).content

        status, _cookie = _login(client, ADMIN_TOKEN)
        assert status == 303
        page = client.get("/admin/").text
    row = re.search(r"<td>acme</td><td>lin</td>(.*?)</tr>", page, re.S)
    assert row is not None, page
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1))
    version, provider, workers, memory = cells
    assert (version, provider) == ("1", "CPU")
    assert 1 <= int(workers) <= 2  # the worker that compiled it, and the one that ran it
    # at least its ONNX weights per worker holding it (plus what its first run grew); the page
    # rounds to 0.1 KiB
    assert _bytes(memory) >= int(workers) * len(onnx) * 0.95


def test_overview_counts_requests_and_errors_by_tenant_and_by_model(
    make_settings: SettingsFactory,
) -> None:
    built = affine().built()
    with TestClient(create_app(make_settings())) as client:
        for tenant, good, bad in (("acme", 3, 2), ("beta", 1, 0)):
            made = client.post(
                "/v1/admin/tenants", json={"name": tenant}, headers=auth(ADMIN_TOKEN)
            )
            key = auth(made.json()["key"])
            files = upload_files(built)
            created = client.post("/v1/models", data={"name": "lin"}, files=files, headers=key)
            assert created.status_code == 201, created.text
            for width, times, status in ((4, good, 200), (5, bad, 400)):  # x is [batch, 4]
                x = {"name": "x", "datatype": "FP32", "shape": [1, width], "data": [1] * width}
                for _ in range(times):
                    answer = client.post("/v2/models/lin/infer", json={"inputs": [x]}, headers=key)
                    assert answer.status_code == status, answer.text
        assert _login(client, ADMIN_TOKEN)[0] == 303
        page = client.get("/admin/").text
    tenants = dict(_counted(page, r'<td><a href="/admin/tenants/([^"]+)">'))
    # Top models link to their tenant's models page, as top tenants link to theirs.
    models = dict(_counted(page, r'<tr><td><a href="/admin/models\?tenant=[a-z]+">([a-z]+/[a-z]+)'))
    assert tenants == {"acme": (5, 2), "beta": (1, 0)}
    assert models == {"acme/lin": (5, 2), "beta/lin": (1, 0)}


def _counted(page: str, name: str) -> list[tuple[str, tuple[int, int]]]:
    """(name, (requests, errors)) of each row of a top-N table whose first cell matches `name`."""
    cells = r'[^<]*(?:</a>)?</td><td class="num">(\d+)</td><td class="num">(\d+)</td>'
    return [(n, (int(r), int(e))) for n, r, e in re.findall(name + cells, page)]


class CountingArtifacts(Artifacts):
    """The real artifacts folder, counting the reads made of it."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: Counter[str] = Counter()

    def get(self, sha: str) -> bytes:
        self.reads["get"] += 1
        return super().get(sha)

    def size(self, sha: str) -> int:
        self.reads["size"] += 1
        return super().size(sha)

    def list(self) -> Iterator[str]:
        self.reads["list"] += 1
        return super().list()


def test_tenants_page_sums_each_tenants_distinct_artifacts_without_reading_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CountingArtifacts(tmp_path / "data" / "artifacts")
    monkeypatch.setattr(server.main, "open_artifacts", lambda _url, _data_dir: store)
    lin, net = affine().built(), mlp().built()
    stored: dict[str, set[bytes]] = {"acme": set(), "beta": set()}
    with TestClient(create_app(_settings(tmp_path))) as client:
        for tenant, uploads in (("acme", [lin, lin, net]), ("beta", [lin])):
            made = client.post(
                "/v1/admin/tenants", json={"name": tenant}, headers=auth(ADMIN_TOKEN)
            )
            key = auth(made.json()["key"])
            for built in uploads:  # lin twice: two versions naming one set of artifacts
                name = "net" if built is net else "lin"
                files = upload_files(built)
                created = client.post("/v1/models", data={"name": name}, files=files, headers=key)
                assert created.status_code == 201, created.text
                version = created.json()["version"]
                onnx = client.get(f"/v1/models/{name}/versions/{version}/onnx", headers=key)
                stored[tenant] |= {built.program, built.params or b"", onnx.content}
        assert _login(client, ADMIN_TOKEN)[0] == 303
        store.reads.clear()
        page = client.get("/admin/tenants").text
        assert sum(store.reads.values()) == 0, store.reads
    for tenant, blobs in stored.items():
        row = re.search(rf">{tenant}</a></td>(.*?)</tr>", page, re.S)
        assert row is not None, page
        cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
        expected = sum(len(blob) for blob in blobs)  # each distinct artifact once
        assert abs(_bytes(cells[3]) - expected) <= 0.05 * 1024  # the page rounds to 0.1 KiB


def _bytes(size: str) -> float:
    number, unit = size.split()
    return float(number) * {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]
