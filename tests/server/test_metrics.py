"""GET /metrics: admin only, and the counts the requests of each test must have produced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from graph_proto.types import DType
from server.main import create_app
from server.services.limits import Limits
from server.services.metrics import MAX_MODELS_PER_TENANT, OTHER_MODELS, Metrics
from tests.support.api import ADMIN_TOKEN, assert_error, auth, new_tenant
from tests.support.backends import SettingsFactory
from tests.support.builders import GraphBuilder, V, affine
from tests.support.uploads import upload
from tests.support.v2 import binary_input, binary_request

X = np.arange(8, dtype=np.float32).reshape(2, 4)
JSON_INFER = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": X.ravel().tolist()}]
}
Labels = tuple[tuple[str, str], ...]


def scrape(client: TestClient) -> dict[tuple[str, Labels], float]:
    """Every sample of /metrics, by (sample name, sorted labels)."""
    response = client.get("/metrics", headers=auth(ADMIN_TOKEN))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def sample(name: str, **labels: str) -> tuple[str, Labels]:
    return name, tuple(sorted(labels.items()))


def requests(tenant: str, model: str, protocol: str, status: int) -> tuple[str, Labels]:
    return sample(
        "graphgate_inference_requests_total",
        tenant=tenant,
        model=model,
        protocol=protocol,
        status=str(status),
    )


def _binary_infer(client: TestClient, key: str) -> int:
    body, headers = binary_request({"inputs": [binary_input(X)]}, [X])
    response = client.post("/v2/models/m/infer", content=body, headers={**auth(key), **headers})
    return response.status_code


def _rejected_program() -> bytes:
    """Two unknown ops and a forbidden one: three diagnostics, two distinct codes."""
    g = GraphBuilder()
    g.feed("x", DType.FP32, [-1, 4])
    g.node("no_such_op", {"X": ["x"]}, {"Out": [V("a", [-1, 4])]})
    g.node("no_such_op", {"X": ["a"]}, {"Out": [V("b", [-1, 4])]})
    g.node("py_func", {"X": ["b"]}, {"Out": [V("c", [-1, 4])]})
    g.fetch("c")
    return g.program_bytes()


def test_metrics_need_an_admin_key(client: TestClient, key_a: str) -> None:
    missing = client.get("/metrics")
    assert_error(missing, 401, "UNAUTHORIZED")
    assert missing.headers["www-authenticate"] == "Bearer"
    assert_error(client.get("/metrics", headers=auth(ADMIN_TOKEN + "x")), 401, "UNAUTHORIZED")
    assert_error(client.get("/metrics", headers=auth(key_a)), 403, "FORBIDDEN")
    assert client.get("/metrics", headers=auth(ADMIN_TOKEN)).status_code == 200


def test_inference_counts_failures_and_latency_per_tenant_and_model(
    client: TestClient, key_a: str, key_b: str
) -> None:
    upload(client, key_a)
    upload(client, key_b)
    for _ in range(2):
        assert (
            client.post("/v2/models/m/infer", json=JSON_INFER, headers=auth(key_a)).status_code
            == 200
        )
    assert _binary_infer(client, key_a) == 200
    wrong_type = {"inputs": [{**JSON_INFER["inputs"][0], "datatype": "INT64"}]}
    bad = client.post("/v2/models/m/infer", json=wrong_type, headers=auth(key_a))
    assert_error(bad, 400, "INPUT_DTYPE")
    unknown = client.post("/v2/models/nope/infer", json=JSON_INFER, headers=auth(key_a))
    assert_error(unknown, 404, "NOT_FOUND")
    assert (
        client.post("/v2/models/m/infer", json=JSON_INFER, headers=auth(key_b)).status_code == 200
    )
    assert_error(client.post("/v2/models/m/infer", json=JSON_INFER), 401, "UNAUTHORIZED")
    # not an inference request: never counted as one
    assert client.get("/v2/models/m", headers=auth(key_a)).status_code == 200

    got = scrape(client)
    assert got[requests("tenant-a", "m", "json", 200)] == 2
    assert got[requests("tenant-a", "m", "binary", 200)] == 1
    assert got[requests("tenant-a", "m", "json", 400)] == 1
    assert (
        got[requests("tenant-a", "", "json", 404)] == 1
    )  # no label for a name that resolved nothing
    assert got[requests("tenant-b", "m", "json", 200)] == 1
    assert got[requests("", "", "json", 401)] == 1
    total = sum(v for (name, _), v in got.items() if name == "graphgate_inference_requests_total")
    assert total == 7

    failures = "graphgate_inference_failures_total"
    assert (
        got[sample(failures, tenant="tenant-a", model="m", protocol="json", code="INPUT_DTYPE")]
        == 1
    )
    assert (
        got[sample(failures, tenant="tenant-a", model="", protocol="json", code="NOT_FOUND")] == 1
    )
    assert got[sample(failures, tenant="", model="", protocol="json", code="UNAUTHORIZED")] == 1
    assert sum(v for (name, _), v in got.items() if name == failures) == 3

    latency = "graphgate_inference_latency_seconds"
    a_m = {"tenant": "tenant-a", "model": "m"}
    assert got[sample(f"{latency}_count", **a_m, protocol="json")] == 3
    assert got[sample(f"{latency}_count", **a_m, protocol="binary")] == 1
    assert got[sample(f"{latency}_bucket", **a_m, protocol="json", le="+Inf")] == 3
    assert got[sample(f"{latency}_count", tenant="tenant-b", model="m", protocol="json")] == 1
    assert got[sample(f"{latency}_count", tenant="tenant-a", model="", protocol="json")] == 1
    assert got[sample(f"{latency}_sum", **a_m, protocol="json")] > 0


def test_label_values_never_echo_what_the_caller_sent(client: TestClient, key_a: str) -> None:
    upload(client, key_a)
    client.post("/v2/models/caller-chosen-name/infer", json=JSON_INFER, headers=auth(key_a))
    client.post("/v2/models/m/versions/77/infer", json=JSON_INFER, headers=auth(key_a))
    got = scrape(client)
    values = {value for _, labels in got for _, value in labels}
    assert not {v for v in values if "caller-chosen-name" in v or "77" in v}
    assert got[requests("tenant-a", "", "json", 404)] == 2


def test_uploads_count_outcomes_and_each_distinct_rejection_code(
    client: TestClient, key_a: str
) -> None:
    upload(client, key_a)
    upload(client, key_a)
    files = {"program": _rejected_program()}
    rejected = client.post("/v1/models", data={"name": "bad"}, files=files, headers=auth(key_a))
    assert rejected.status_code == 422
    codes = [d["code"] for d in rejected.json()["diagnostics"]]
    assert sorted(codes) == ["OP_FORBIDDEN", "OP_UNKNOWN", "OP_UNKNOWN"]
    bad_name = client.post(
        "/v1/models", data={"name": "Bad Name"}, files=files, headers=auth(key_a)
    )
    assert_error(bad_name, 400, "INVALID_NAME")  # refused before validation: not an upload

    got = scrape(client)
    uploads = "graphgate_model_uploads_total"
    assert got[sample(uploads, tenant="tenant-a", outcome="accepted")] == 2
    assert got[sample(uploads, tenant="tenant-a", outcome="rejected")] == 1
    rejections = "graphgate_model_upload_rejections_total"
    assert got[sample(rejections, tenant="tenant-a", code="OP_UNKNOWN")] == 1
    assert got[sample(rejections, tenant="tenant-a", code="OP_FORBIDDEN")] == 1
    assert sum(v for (name, _), v in got.items() if name == rejections) == 2


def test_429s_are_counted_by_reason(client: TestClient, key_a: str, key_b: str) -> None:
    upload(client, key_a)
    tenant_a = client.app.state.tenants.authenticate(key_a).tenant_id  # type: ignore[attr-defined]
    limits = Limits.build(1000, 1, 1, clock=lambda: 0.0)  # a frozen clock: one token each
    client.app.state.limits = limits  # type: ignore[attr-defined]
    with limits.concurrency.slot(tenant_a):
        refused = client.post("/v2/models/m/infer", json=JSON_INFER, headers=auth(key_a))
        assert_error(refused, 429, "TOO_MANY_CONCURRENT")
    refused = client.post("/v2/models/m/infer", json=JSON_INFER, headers=auth(key_a))
    assert_error(refused, 429, "RATE_LIMITED")
    assert client.get("/v1/models", headers=auth(key_b)).status_code == 200
    assert_error(client.get("/v1/models", headers=auth(key_b)), 429, "RATE_LIMITED")

    got = scrape(client)
    throttled = "graphgate_throttled_requests_total"
    assert got[sample(throttled, tenant="tenant-a", reason="concurrency")] == 1
    assert got[sample(throttled, tenant="tenant-a", reason="rate")] == 1
    assert got[sample(throttled, tenant="tenant-b", reason="rate")] == 1
    # both were refused before the model resolved, so they carry no model label
    assert got[requests("tenant-a", "", "json", 429)] == 2
    failures = "graphgate_inference_failures_total"
    assert (
        got[sample(failures, tenant="tenant-a", model="", protocol="json", code="RATE_LIMITED")]
        == 1
    )
    assert (
        got[
            sample(
                failures, tenant="tenant-a", model="", protocol="json", code="TOO_MANY_CONCURRENT"
            )
        ]
        == 1
    )


def test_each_app_has_its_own_registry(
    client: TestClient, key_a: str, tmp_path: Path, make_settings: SettingsFactory
) -> None:
    upload(client, key_a)
    assert (
        client.post("/v2/models/m/infer", json=JSON_INFER, headers=auth(key_a)).status_code == 200
    )
    other_settings = make_settings(data_dir=tmp_path / "other")
    with TestClient(create_app(other_settings)) as other:
        key = new_tenant(other, "tenant-a")
        upload(other, key)
        names = {name for name, _ in scrape(other)}
        assert "graphgate_inference_requests_total" not in names  # nothing inferred there yet
        assert (
            scrape(other)[
                sample("graphgate_model_uploads_total", tenant="tenant-a", outcome="accepted")
            ]
            == 1
        )
    assert scrape(client)[requests("tenant-a", "m", "json", 200)] == 1


def test_deleted_models_leave_metrics_and_a_tenant_s_model_series_are_bounded(
    client: TestClient, key_a: str
) -> None:
    """Series of a deleted model go with it; past MAX_MODELS_PER_TENANT model labels a
    tenant's further models count under one OTHER_MODELS label."""
    metrics: Metrics = client.app.state.metrics  # type: ignore[attr-defined]
    tenant_id = client.app.state.tenants.authenticate(key_a).tenant_id  # type: ignore[attr-defined]
    for i in range(MAX_MODELS_PER_TENANT + 5):
        metrics.inference(
            tenant_id, f"m{i}", protocol="json", status="200", code=None, seconds=0.001
        )
        metrics.inference(
            tenant_id, f"m{i}", protocol="binary", status="422", code="X", seconds=0.001
        )
    page = client.get("/metrics", headers=auth(ADMIN_TOKEN)).text
    assert f'model="m{MAX_MODELS_PER_TENANT - 1}"' in page
    assert f'model="m{MAX_MODELS_PER_TENANT}"' not in page
    assert f'model="{OTHER_MODELS}"' in page
    upload(client, key_a, "m0", affine().built())
    assert client.delete("/v1/models/m0", headers=auth(key_a)).status_code == 204
    assert 'model="m0"' not in client.get("/metrics", headers=auth(ADMIN_TOKEN)).text
