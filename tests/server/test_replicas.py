"""Three `graphgate serve` replicas on loopback behind nginx, sharing PostgreSQL, S3 (SeaweedFS)
and Redis: they answer alike, agree on deletes and revocations long before their caches expire,
share one rate budget, and a replica killed mid-traffic loses nothing acknowledged."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import httpx2
import numpy as np
import pytest

from tests.support import realservers
from tests.support.api import ADMIN_TOKEN, auth, post_tenant
from tests.support.builders import affine
from tests.support.served import Server
from tests.support.uploads import post_model

X = np.arange(8, dtype=np.float32).reshape(2, 4)
INFER = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": X.ravel().tolist()}]}
Servers = tuple[realservers.Server, realservers.Server]


@pytest.fixture(scope="module")
def cluster(
    postgres_s3: Servers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[Server], str]]:
    """Three replicas (rate 1/s, burst 200 per tenant) and nginx in front; yields them and
    nginx's URL."""
    postgres, s3 = postgres_s3
    with realservers.scratch() as root:
        redis_server = realservers.start_redis(root / "redis")
        env = {
            **os.environ,
            **realservers.s3_environment(s3),
            "GRAPHGATE_DATABASE_URL": realservers.new_database(postgres),
            "GRAPHGATE_ARTIFACTS_URL": f"s3://{realservers.S3_BUCKET}/{uuid.uuid4().hex}",
            "GRAPHGATE_REDIS_URL": f"redis://{realservers.LOOPBACK}:{redis_server.port}/0",
            "GRAPHGATE_AUTH_CACHE_TTL_S": "300",
            "GRAPHGATE_MODEL_LOOKUP_TTL_S": "300",
            "GRAPHGATE_TENANT_RATE_PER_S": "1",
            "GRAPHGATE_TENANT_RATE_BURST": "200",
            "GRAPHGATE_WORKERS": "1",
        }
        data = tmp_path_factory.mktemp("replicas")
        replicas = [Server(data / f"r{i}", env, data / f"r{i}.log") for i in range(3)]
        nginx = None
        try:
            for replica in replicas:
                replica.launch()
            for replica in replicas:
                try:
                    realservers.wait_until(replica.ready, "a graphgate replica", 180)
                except TimeoutError:
                    raise AssertionError(replica.log_tail()) from None
            nginx = realservers.start_nginx(root / "nginx", [r.port for r in replicas])
            yield replicas, f"http://{realservers.LOOPBACK}:{nginx.port}"
        finally:
            if nginx is not None:
                nginx.stop()
            for replica in replicas:
                replica.stop()
            redis_server.stop()


def new_tenant(url: str) -> str:
    """A tenant of its own: the cluster and its database serve the whole module."""
    return post_tenant(url, f"t-{uuid.uuid4().hex[:8]}")


def infer(url: str, key: str, name: str) -> httpx2.Response:
    return httpx2.post(f"{url}/v2/models/{name}/infer", json=INFER, headers=auth(key), timeout=30)


# A published invalidation arrives in well under a millisecond, and one check (three requests
# to the replicas) well under a second: 10 s is over ten times that, and far short of the 300 s
# TTLs that would otherwise make the replicas see the change.
def eventually(check: Callable[[], bool], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_replicas_agree_on_outputs_deletes_and_revocations(
    cluster: tuple[list[Server], str],
) -> None:
    replicas, nginx = cluster
    key = new_tenant(nginx)
    assert post_model(replicas[0].url, key, "agree", affine().built()).status_code == 201
    outputs = []
    for target in [r.url for r in replicas] + [nginx] * 3:
        response = infer(target, key, "agree")
        assert response.status_code == 200, response.text
        outputs.append(np.asarray(response.json()["outputs"][0]["data"], dtype=np.float32))
    assert all(np.allclose(o, outputs[0], rtol=0, atol=0) for o in outputs)

    assert httpx2.delete(f"{replicas[1].url}/v1/models/agree", headers=auth(key)).status_code == 204
    assert eventually(lambda: all(infer(r.url, key, "agree").status_code == 404 for r in replicas))

    key_id = key.split("_")[1]
    revoked = httpx2.delete(f"{replicas[2].url}/v1/admin/keys/{key_id}", headers=auth(ADMIN_TOKEN))
    assert revoked.status_code == 200, revoked.text
    assert eventually(
        lambda: all(
            httpx2.get(f"{r.url}/v1/models", headers=auth(key)).status_code == 401 for r in replicas
        )
    )


def test_rate_limit_is_one_budget_across_replicas(cluster: tuple[list[Server], str]) -> None:
    replicas, _nginx = cluster
    key = new_tenant(replicas[0].url)
    started = time.monotonic()
    codes = [
        httpx2.get(f"{replicas[i % 3].url}/v1/models", headers=auth(key)).status_code
        for i in range(240)
    ]
    refills = int(time.monotonic() - started) + 1  # tokens back at 1/s while they ran
    # One bucket of 200: per-replica buckets would have let all 240 through.
    assert 200 <= codes.count(200) <= 200 + refills, codes
    assert codes.count(429) == 240 - codes.count(200)


def test_sigkill_mid_traffic_loses_nothing_acknowledged(cluster: tuple[list[Server], str]) -> None:
    replicas, nginx = cluster
    key, reader = new_tenant(nginx), new_tenant(nginx)
    assert post_model(nginx, reader, "base", affine().built()).status_code == 201
    acknowledged: list[str] = []
    reads: list[int] = []
    stop = threading.Event()

    def traffic() -> None:  # idempotent GETs, under the reader's burst of 200
        while not stop.is_set() and len(reads) < 150:
            reads.append(httpx2.get(f"{nginx}/v2/models/base", headers=auth(reader)).status_code)

    def uploads() -> None:
        for i in range(6):
            name = f"u{i}"
            try:
                if post_model(nginx, key, name, affine().built()).status_code == 201:
                    acknowledged.append(name)
            except httpx2.HTTPError:
                pass  # not acknowledged: may or may not exist, but never half

    threads = [threading.Thread(target=traffic), threading.Thread(target=uploads)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    replicas[2].stop(signal.SIGKILL)
    threads[1].join(timeout=120)
    stop.set()
    threads[0].join(timeout=30)

    # nginx retried the GETs the killed replica dropped or refused on another replica.
    assert reads and all(code == 200 for code in reads), reads
    listed = httpx2.get(f"{nginx}/v1/models", headers=auth(key)).json()["models"]
    names = {m["name"] for m in listed}
    assert set(acknowledged) <= names
    for name in names:  # every visible model is whole: its version serves
        assert infer(replicas[0].url, key, name).status_code == 200
