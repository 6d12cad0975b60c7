"""Scale-out backends against the embedded default, same script, same run.

Usage: python benchmarks/bench_backends.py [--uploads N] [--infers N] [--seconds S]

1. Upload -> ready and V2 inference p50 through one app in-process (TestClient): SQLite + the
   artifacts folder vs PostgreSQL + S3 (SeaweedFS) + Redis, the real servers started here as the
   tests start them (tests/support/realservers.py). Uploads and inferences of the two alternate.
2. Throughput at 32 concurrent clients (threads, keep-alive) of 1 `graphgate serve` replica
   direct, 1 replica behind nginx, and 3 replicas behind nginx, all on PostgreSQL + S3 + Redis.
   On a 2-core machine more replicas add no cores: the figure to read is nginx's overhead per
   request (1 replica via nginx vs direct).
Writes benchmarks/results/backends.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx2
import numpy as np
from fastapi.testclient import TestClient
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.main import create_app  # noqa: E402
from server.settings import Settings  # noqa: E402
from tests.support import realservers  # noqa: E402
from tests.support.api import ADMIN_TOKEN, auth, new_tenant, post_tenant  # noqa: E402
from tests.support.builders import affine  # noqa: E402
from tests.support.served import Server  # noqa: E402
from tests.support.uploads import post_model, post_upload  # noqa: E402

X = np.arange(8, dtype=np.float32).reshape(2, 4)
INFER = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": X.ravel().tolist()}]}
RESULTS = ROOT / "benchmarks" / "results" / "backends.md"


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:.2f}"


def in_process(settings: dict[str, Settings], uploads: int, infers: int) -> list[str]:
    with (
        TestClient(create_app(settings["embedded"])) as a,
        TestClient(create_app(settings["postgres_s3"])) as b,
    ):
        clients = {"embedded": a, "postgres_s3": b}
        keys = {name: new_tenant(c, "bench") for name, c in clients.items()}
        up: dict[str, list[float]] = {n: [] for n in clients}
        inf: dict[str, list[float]] = {n: [] for n in clients}
        for i in range(uploads):
            built = affine().built()
            for name, c in clients.items():
                start = time.perf_counter()
                r = post_upload(c, keys[name], f"m{i}", built)
                up[name].append(time.perf_counter() - start)
                assert r.status_code == 201, r.text
        for _ in range(infers):
            for name, c in clients.items():
                start = time.perf_counter()
                r = c.post("/v2/models/m0/infer", json=INFER, headers=auth(keys[name]))
                inf[name].append(time.perf_counter() - start)
                assert r.status_code == 200, r.text
    rows = ["| backend | upload -> ready p50 (ms) | inference p50 (ms) |", "|---|---|---|"]
    rows += [f"| {n} | {ms(up[n])} | {ms(inf[n])} |" for n in clients]
    ratio = statistics.median(up["postgres_s3"]) / statistics.median(up["embedded"])
    ratio_inf = statistics.median(inf["postgres_s3"]) / statistics.median(inf["embedded"])
    rows.append(f"\nPostgreSQL + S3 / embedded: upload {ratio:.2f}x, inference {ratio_inf:.2f}x")
    return rows


def throughput(url: str, key: str, clients: int, seconds: float) -> float:
    done = [0] * clients
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        with httpx2.Client(timeout=30) as http:
            while time.monotonic() < stop:
                r = http.post(f"{url}/v2/models/m/infer", json=INFER, headers=auth(key))
                assert r.status_code == 200, r.text
                done[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / seconds


def replicas(
    postgres: realservers.Server, s3: realservers.Server, root: Path, seconds: float
) -> list[str]:
    redis_server = realservers.start_redis(root / "redis")
    env = {
        **os.environ,
        **realservers.s3_environment(s3),
        "GRAPHGATE_DATABASE_URL": realservers.new_database(postgres),
        "GRAPHGATE_ARTIFACTS_URL": f"s3://{realservers.S3_BUCKET}/{uuid.uuid4().hex}",
        "GRAPHGATE_REDIS_URL": f"redis://{realservers.LOOPBACK}:{redis_server.port}/0",
        "GRAPHGATE_TENANT_RATE_PER_S": "0",
        "GRAPHGATE_TENANT_MAX_CONCURRENT": "0",
        "GRAPHGATE_WORKERS": "1",
    }
    nodes = [Server(root / f"r{i}", env, root / f"r{i}.log") for i in range(3)]
    servers: list[realservers.Server] = [redis_server]
    try:
        for node in nodes:
            node.launch()
        for node in nodes:
            try:
                realservers.wait_until(node.ready, "a replica", 180)
            except TimeoutError:
                raise SystemExit(node.log_tail()) from None
        one = realservers.start_nginx(root / "nginx1", [nodes[0].port])
        three = realservers.start_nginx(root / "nginx3", [n.port for n in nodes])
        servers += [one, three]
        key = post_tenant(nodes[0], "bench")
        assert post_model(nodes[0], key, built=affine().built()).status_code == 201
        for n in nodes:  # warm every replica's compiled cache
            httpx2.post(f"{n.url}/v2/models/m/infer", json=INFER, headers=auth(key), timeout=60)
        direct = throughput(nodes[0].url, key, 32, seconds)
        via_one = throughput(f"http://{realservers.LOOPBACK}:{one.port}", key, 32, seconds)
        via_three = throughput(f"http://{realservers.LOOPBACK}:{three.port}", key, 32, seconds)
    finally:
        for s in servers:
            s.stop()
        for n in nodes:
            n.stop()
    overhead_ms = (1 / via_one - 1 / direct) * 1e3
    return [
        "| setup (32 clients, PostgreSQL + S3 + Redis) | requests/s |",
        "|---|---|",
        f"| 1 replica, direct | {direct:.0f} |",
        f"| 1 replica behind nginx | {via_one:.0f} |",
        f"| 3 replicas behind nginx | {via_three:.0f} |",
        f"\n3 replicas / 1 replica (both via nginx): {via_three / via_one:.2f}x; nginx costs "
        f"{overhead_ms:.3f} ms of server time per request at this load (1/throughput via nginx "
        "minus direct).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--infers", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with realservers.scratch() as root:
        postgres = realservers.start_postgres(root / "pg")
        s3 = realservers.start_seaweedfs(root / "s3")
        os.environ.update(realservers.s3_environment(s3))
        try:
            settings = {
                "embedded": Settings(
                    data_dir=root / "embedded", admin_token=SecretStr(ADMIN_TOKEN)
                ),
                "postgres_s3": Settings(
                    data_dir=root / "pgs3",
                    admin_token=SecretStr(ADMIN_TOKEN),
                    database_url=SecretStr(realservers.new_database(postgres)),
                    artifacts_url=f"s3://{realservers.S3_BUCKET}/{uuid.uuid4().hex}",
                ),
            }
            first = in_process(settings, args.uploads, args.infers)
            second = replicas(postgres, s3, root, args.seconds)
        finally:
            s3.stop()
            postgres.stop()
    command = f"python benchmarks/bench_backends.py --uploads {args.uploads} --infers {args.infers} --seconds {args.seconds:g}"
    text = "\n".join(
        [
            "# Scale-out backends (benchmarks/bench_backends.py)",
            "",
            f"`{command}` on {os.cpu_count()} CPUs; the servers run on the same machine.",
            "",
            "## Upload -> ready and inference, one app in-process",
            "",
            *first,
            "",
            "## Replicas behind nginx",
            "",
            *second,
            "",
        ]
    )
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
