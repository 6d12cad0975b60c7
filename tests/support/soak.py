"""The soak tests/server/test_soak.py bounds and benchmarks/bench_soak.py reports: many
requests at high concurrency across two tenants against a real `graphgate serve`, and the
resident memory of the server process and its workers (VmRSS from /proc, for the server and
every process whose parent it is) after warm-up and at the end."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx2

from tests.support.api import auth, post_tenant
from tests.support.builders import affine, mlp
from tests.support.served import Server
from tests.support.uploads import post_model

MAX_GROWTH: Final = 0.05
WARM_UP_SHARE: Final = 0.2  # the first fifth of the requests fills caches, pools and arenas


@dataclass(frozen=True, slots=True)
class Soak:
    requests: int
    concurrency: int


@dataclass(frozen=True, slots=True)
class SoakFigures:
    statuses: dict[int, int]
    rss_warm_bytes: int  # server + workers, after warm-up
    rss_end_bytes: int  # the same after the last request
    pids_warm: tuple[int, ...]
    pids_end: tuple[int, ...]
    seconds: float

    @property
    def growth(self) -> float:
        return self.rss_end_bytes / self.rss_warm_bytes - 1.0


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a process that ended meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def family_rss(pid: int) -> tuple[int, tuple[int, ...]]:
    """RSS of `pid` and its children (resource tracker and workers), and their pids."""
    pids = (pid, *sorted(_children(pid)))
    return sum(_rss_bytes(p) for p in pids), pids


def _bodies() -> list[tuple[str, dict[str, object]]]:
    """The request mix: a tiny affine model and a small MLP, each in FP32 batches of 1 and 8."""
    out: list[tuple[str, dict[str, object]]] = []
    for model, features in (("affine", 4), ("mlp", 8)):
        for batch in (1, 8):
            data = [float(i % 7) for i in range(batch * features)]
            tensor = {"name": "x", "datatype": "FP32", "shape": [batch, features], "data": data}
            out.append((model, {"inputs": [tensor]}))
    return out


def _send(server: Server, keys: list[str], count: int, concurrency: int) -> Counter[int]:
    """`count` requests from `concurrency` clients, alternating tenants and models."""
    statuses: Counter[int] = Counter()
    lock, bodies = threading.Lock(), _bodies()
    next_index = iter(range(count))

    def client(n: int) -> None:
        key = keys[n % len(keys)]
        with httpx2.Client(base_url=server.url, headers=auth(key), timeout=60) as c:
            for i in next_index:  # shared: each index is taken once (the GIL serialises next)
                model, body = bodies[i % len(bodies)]
                if i % 50 == 0:
                    status = c.get(f"/v1/models/{model}").status_code
                else:
                    status = c.post(f"/v2/models/{model}/infer", json=body).status_code
                with lock:
                    statuses[status] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def run_soak(server: Server, soak: Soak) -> SoakFigures:
    keys = [post_tenant(server, "tenant-a"), post_tenant(server, "tenant-b")]
    for key in keys:
        for name, built in (("affine", affine().built()), ("mlp", mlp().built())):
            response = post_model(server, key, name, built)
            assert response.status_code == 201, response.text
    assert server.process is not None
    pid = server.process.pid
    warm = int(soak.requests * WARM_UP_SHARE)
    started = time.monotonic()
    statuses = _send(server, keys, warm, soak.concurrency)
    rss_warm, pids_warm = family_rss(pid)
    statuses += _send(server, keys, soak.requests - warm, soak.concurrency)
    rss_end, pids_end = family_rss(pid)
    return SoakFigures(
        dict(statuses), rss_warm, rss_end, pids_warm, pids_end, time.monotonic() - started
    )


# The soak measures steady serving, not refusals: the tenants' rate limit (200/s by default)
# would refuse about half of the full run at today's throughput (the 64 clients send ~900/s),
# so it is lifted; each tenant's 32 clients fit its concurrency cap (32) exactly.
SOAK_ENV: Final = {
    "GRAPHGATE_TENANT_RATE_PER_S": "1000000",
    "GRAPHGATE_TENANT_RATE_BURST": "1000000",
}
