"""Serving overhead: a real `graphgate serve` process on loopback against onnxruntime in-process.

Usage: python benchmarks/bench_serving.py [--small-runs N] [--large-runs N] [--threads N]

Starts `graphgate serve` on a free loopback port (fresh data directory, per-tenant rate limit off
so that the benchmark's own request rate is not throttled), creates a tenant, uploads three
models, downloads each one's ONNX from /v1/models/{name}/versions/1/onnx and opens it in this
process with onnxruntime (CPU, the server's session settings): the raw baseline on the very same
graph. Then, batch 1, one client on a persistent keep-alive connection (http.client), the same
input every time, request bodies encoded once beforehand (the client's encoding is not timed;
decoding the answer is):
  - small:     fc 16 -> 16 + softmax on x FP32[1, 16]
  - resnet50:  ResNet50 224x224 saved by real Paddle (benchmarks/bench_executor.py's cached export)
  - transport: mean over x FP32[1, 3, 224, 224] (almost no compute: the time is moving the input)
for raw onnxruntime, V2 binary tensors (binary outputs) and V2 JSON (JSON outputs), runs in
blocks that take turns. Reports p50, p99, throughput (1 / mean), and the goals: added p50 for
the small model over binary <= 1 ms, ResNet50 throughput server/raw >= 0.9, JSON/binary time for
a 1x3x224x224 input <= 10x. ResNet50 is also run by 2 callers at once (throughput at its peak).
The server runs at its defaults: every inference in a worker process (server/dispatch), and
the models here are batchable, so their requests pass the dynamic batcher (queue delay 0 by
default: a lone request goes to a batch thread at once). To show where the added time goes it times requests that cross
more and more of the path (health, model ready, infer) and, in this process with a real worker
pool, the hot path's pieces: the key check and model lookup (from the in-memory caches, as every
request after the first finds them, and from the database, as on a miss), the worker round
trip (RemoteModel.run: shared-memory arena, pipe, the run in the worker), and the layers of a
request (session.run, the executor's scope checks as the worker runs them, the round trip, the
V2 service with decode and encode). Writes benchmarks/results/serving.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "serving.md"
LOOP_COST_SECTION = "## Server CPU per V2 inference, before and after (bench_loop_cost.py)"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import httpx2  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from executor import SessionOptions, compile  # noqa: E402
from graph_proto.types import DType  # noqa: E402
from server.cli.user import decode_infer_response, encode_infer_request  # noqa: E402
from server.dispatch import PoolSettings, WorkerPool  # noqa: E402
from server.services import inference  # noqa: E402
from server.services.types import LoadedModel  # noqa: E402
from tests.support.builders import GraphBuilder, V, mlp  # noqa: E402
from validator import DEFAULT_POLICY, validate  # noqa: E402

ADMIN_TOKEN = "bench-admin-token-0123456789abcdef0123456789"
HEADER_LENGTH = "Inference-Header-Content-Length"
Runner = Callable[[], object]  # what it returns is not used
CPU_ONLY = SessionOptions(use_cuda=False)  # the raw baseline's provider


class Connection:
    """One persistent keep-alive HTTP/1.1 connection (the standard library's http.client): the
    leanest Python client, so that the figures are the server's cost rather than the client's.
    tritonclient uses a C-backed client for the same reason; httpx2's own cost is reported apart."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        host, port = url.removeprefix("http://").split(":")
        self._conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self._headers = headers

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        try:
            return self._send(method, path, body, headers)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # uvicorn closes a keep-alive connection idle for 5 s: open a new one, once.
            self._conn.close()
            return self._send(method, path, body, headers)

    def _send(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str] | None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        self._conn.request(method, path, body=body, headers={**self._headers, **(headers or {})})
        response = self._conn.getresponse()
        return response.status, response.headers, response.read()

    def close(self) -> None:
        self._conn.close()


@dataclass(frozen=True)
class Case:
    key: str  # model name on the server
    label: str
    program: bytes
    params: bytes | None
    feed: str
    x: np.ndarray
    runs: int


def transport_model() -> GraphBuilder:
    """reduce_mean over x FP32[-1, 3, 224, 224] to [-1]: the request body is all that is big."""
    g = GraphBuilder()
    g.feed("x", DType.FP32, [-1, 3, 224, 224])
    attrs = {"dim": [1, 2, 3], "keep_dim": False, "reduce_all": False}
    g.node("reduce_mean", {"X": ["x"]}, {"Out": [V("mean", [-1])]}, attrs)
    g.fetch("mean")
    return g


def cases(small_runs: int, large_runs: int) -> list[Case]:
    import bench_executor

    rng = np.random.default_rng(0)
    small = mlp((16, 16)).built()
    (resnet,) = [m for m in bench_executor.MODELS if m.key == "resnet50"]
    program, params = bench_executor.model_files([resnet])["resnet50"]
    image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    transport = transport_model().built()
    x16 = rng.standard_normal((1, 16)).astype(np.float32)
    return [
        Case("small", "fc 16->16 + softmax, x[1, 16]", small.program, small.params, "x", x16,
             small_runs),
        Case("resnet50", "ResNet50, image[1, 3, 224, 224]", program.read_bytes(),
             params.read_bytes(), "image", image, large_runs),
        Case("transport", "mean of x[1, 3, 224, 224] (input transfer only)", transport.program,
             transport.params, "x", image, large_runs),
    ]  # fmt: skip


# -- the server ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(data_dir: Path, source: Path = ROOT) -> Iterator[str]:
    """`graphgate serve` on a free loopback port, run from the source tree `source`."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "GRAPHGATE_ADMIN_TOKEN": ADMIN_TOKEN,
        "GRAPHGATE_TENANT_RATE_PER_S": "0",
        # No gRPC endpoint: two servers at once (bench_served_pair.py) would both take 8001.
        "GRAPHGATE_GRPC_PORT": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "server.cli", "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--data-dir", str(data_dir)], cwd=source, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.get(f"{url}/v2/health/live", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def tenant_key(url: str) -> str:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    created = httpx2.post(f"{url}/v1/admin/tenants", json={"name": "bench"}, headers=admin)
    created.raise_for_status()
    key: str = created.json()["key"]
    return key


def upload_and_download(client: httpx2.Client, case: Case) -> bytes:
    files = {"program": case.program} | ({"params": case.params} if case.params else {})
    uploaded = client.post("/v1/models", data={"name": case.key}, files=files, timeout=600)
    if uploaded.status_code != 201:
        raise SystemExit(f"upload of {case.key} failed: {uploaded.text[:500]}")
    onnx = client.get(f"/v1/models/{case.key}/versions/1/onnx", timeout=120)
    onnx.raise_for_status()
    return onnx.content


# -- what is timed -------------------------------------------------------------------------


def raw_runner(onnx: bytes, case: Case, threads: int) -> tuple[Runner, Any]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])
    feeds = {case.feed: case.x}
    return (lambda: session.run(None, feeds)), session.run(None, feeds)[0]


def binary_runner(conn: Connection, case: Case) -> tuple[Runner, np.ndarray]:
    body, headers = encode_infer_request({case.feed: case.x})

    def run() -> dict[str, np.ndarray]:
        status, head, content = conn.request("POST", f"/v2/models/{case.key}/infer", body, headers)
        if status != 200:
            raise SystemExit(f"{case.key} binary: {status} {content[:300]!r}")
        return decode_infer_response(content, head.get(HEADER_LENGTH))

    return run, next(iter(run().values()))


def json_request(case: Case) -> bytes:
    entry = {
        "name": case.feed,
        "shape": list(case.x.shape),
        "datatype": "FP32",
        "data": case.x.ravel().tolist(),
    }
    return json.dumps({"inputs": [entry]}).encode()


def httpx_binary_runner(client: httpx2.Client, case: Case) -> Runner:
    """The binary path through httpx2.Client: what a user of that library sees."""
    body, headers = encode_infer_request({case.feed: case.x})

    def run() -> None:
        response = client.post(f"/v2/models/{case.key}/infer", content=body, headers=headers)
        response.raise_for_status()
        decode_infer_response(response.content, response.headers.get(HEADER_LENGTH))

    return run


def json_runner(conn: Connection, case: Case) -> tuple[Runner, np.ndarray]:
    body = json_request(case)
    headers = {"Content-Type": "application/json"}

    def run() -> np.ndarray:
        status, _, content = conn.request("POST", f"/v2/models/{case.key}/infer", body, headers)
        if status != 200:
            raise SystemExit(f"{case.key} JSON: {status} {content[:300]!r}")
        (out,) = json.loads(content)["outputs"]
        return np.asarray(out["data"], np.float32).reshape(out["shape"])

    return run, run()


def parallel_rate(runners: list[Runner], runs: int) -> float:
    """Requests per second with one thread per runner, each making `runs` calls after 2 warm-ups."""
    from concurrent.futures import ThreadPoolExecutor

    def loop(run: Runner) -> None:
        for _ in range(runs):
            run()

    for run in runners:
        run()
        run()
    with ThreadPoolExecutor(len(runners)) as pool:
        start = time.perf_counter()
        list(pool.map(loop, runners))
        return len(runners) * runs / (time.perf_counter() - start)


def timed(runners: dict[str, Runner], runs: int, block: int) -> dict[str, list[float]]:
    """`runs` timed calls of each runner, in blocks of `block` that take turns (after warm-up)."""
    for run in runners.values():
        for _ in range(max(3, block // 4)):
            run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    while len(next(iter(times.values()))) < runs:
        for name, run in runners.items():
            run()  # untimed: the first call after switching pays for cold caches
            for _ in range(block):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return times


@dataclass(frozen=True)
class Stats:
    p50_ms: float
    p99_ms: float
    per_s: float  # 1 / mean: one client, one request at a time

    @classmethod
    def of(cls, seconds: list[float]) -> Stats:
        ms = np.asarray(seconds) * 1e3
        return cls(
            float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), 1e3 / float(ms.mean())
        )


def resnet_rates(
    url: str, headers: dict[str, str], onnx: bytes, case: Case, threads: int
) -> dict[str, float]:
    """Throughput with 2 callers at once (raw: 2 threads on one session; server: 2 clients, each
    its own connection), next to one at a time: a server overlaps one request's HTTP work with
    another's compute."""
    runs = max(5, case.runs // 2)
    raw, _ = raw_runner(onnx, case, threads)
    clients = [Connection(url, headers) for _ in range(2)]
    try:
        served = [binary_runner(c, case)[0] for c in clients]
        return {
            "raw, 2 threads": parallel_rate([raw, raw], runs),
            "server binary, 2 clients": parallel_rate(served, runs),
        }
    finally:
        for c in clients:
            c.close()


# -- where the time goes (in this process, no HTTP) ----------------------------------------


@contextmanager
def worker_pool() -> Iterator[WorkerPool]:
    """A real worker pool in this process (one worker: one request at a time here)."""
    pool = WorkerPool(PoolSettings(workers=1))
    pool.start()
    try:
        yield pool
    finally:
        pool.stop()


SERVICE_BINARY = "V2 service, binary (decode, worker run, encode)"


def layers(case: Case, runs: int, pool: WorkerPool) -> dict[str, float]:
    """Median ms of each layer a request crosses, without HTTP: session.run and the executor's
    CompiledModel.run (scope checks) in this process, as a worker runs them; RemoteModel.run
    (the worker round trip: arena, pipe, CompiledModel.run in the worker, outputs copied
    back); and the V2 service (decode, worker run, encode), binary and JSON, unbatched."""
    local = compile(validate(case.program, case.params), CPU_ONLY)
    remote = pool.compile(
        case.program, case.params, DEFAULT_POLICY, CPU_ONLY, lambda: (case.program, case.params)
    )
    model = LoadedModel("t", case.key, 1, remote)
    feeds = {case.feed: case.x}
    binary_body, binary_headers = encode_infer_request(feeds)
    json_body = json_request(case)
    steps: dict[str, Runner] = {
        "session.run": lambda: local.session.run(None, feeds),
        "CompiledModel.run (scope checks)": lambda: local.run(feeds),
        "RemoteModel.run (worker round trip)": lambda: remote.run(feeds, label=model.label),
        SERVICE_BINARY: lambda: inference.infer(model, binary_body, binary_headers),
        "V2 service, JSON (decode, worker run, encode)": lambda: inference.infer(
            model, json_body, {}
        ),
    }
    times = timed(steps, runs, max(1, runs // 5))
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


LIVE, READY = "GET /v2/health/live", "GET /v2/models/{name}/ready"
INFER, VIA_HTTPX = "POST /v2/models/{name}/infer (binary)", "the same through httpx2.Client"
KEY_CACHED = "key check, cached (TenantService.authenticate)"
MODEL_CACHED = "model lookup, cached (ModelService.resolve)"
ROUND_TRIP = "worker round trip (RemoteModel.run, unbatched)"
KEY_DB, MODEL_DB = "key check, database (cache off)", "model lookup, database (cache off)"


def served_anatomy(conn: Connection, client: httpx2.Client, case: Case) -> dict[str, float]:
    """p50 ms of three requests to the server that cross more and more of an inference, and of
    the last one through httpx2.Client."""
    binary, _ = binary_runner(conn, case)
    steps: dict[str, Runner] = {
        LIVE: lambda: conn.request("GET", "/v2/health/live"),
        READY: lambda: conn.request("GET", f"/v2/models/{case.key}/ready"),
        INFER: binary,
        VIA_HTTPX: httpx_binary_runner(client, case),
    }
    times = timed(steps, case.runs, max(5, case.runs // 10))
    return {name: float(np.percentile(t, 50)) * 1e3 for name, t in times.items()}


def lookups(data_dir: Path, key: str, case: Case, runs: int) -> dict[str, float]:
    """p50 ms of the hot path's pieces every inference crosses (in this process, on the
    server's data directory, with a real worker pool): the key check and the model lookup
    from the in-memory caches (a hit, as every request after the first), the worker round
    trip of the model they resolve (RemoteModel.run), and the key check and model lookup from
    the database (services with the caches off, as on a miss or TTL expiry; the compiled model
    itself stays cached)."""
    from server.db.engine import open_database
    from server.services.models import ModelService
    from server.services.tenants import TenantService
    from server.storage.artifacts import Artifacts

    sessions = open_database(data_dir / "graphgate.db")
    artifacts = Artifacts(data_dir / "artifacts")
    name, feeds = case.key, {case.feed: case.x}
    with worker_pool() as pool:
        tenants, models = TenantService(sessions), ModelService(sessions, artifacts, pool=pool)
        tenants_db = TenantService(sessions, cache_ttl_s=0)
        models_db = ModelService(sessions, artifacts, pool=pool, lookup_ttl_s=0)
        principal = tenants.authenticate(key)
        loaded = models.resolve(principal, name, None)  # compiles once; then it is cached
        models_db.resolve(principal, name, None)
        steps: dict[str, Runner] = {
            KEY_CACHED: lambda: tenants.authenticate(key),
            MODEL_CACHED: lambda: models.resolve(principal, name, None),
            ROUND_TRIP: lambda: loaded.compiled.run(feeds, label=loaded.label),
            KEY_DB: lambda: tenants_db.authenticate(key),
            MODEL_DB: lambda: models_db.resolve(principal, name, None),
        }
        times = timed(steps, runs, max(5, runs // 10))
    return {step: float(np.percentile(t, 50)) * 1e3 for step, t in times.items()}


# -- report --------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value:.3f} ms" if value < 10 else f"{value:.1f} ms"


def report(
    args: argparse.Namespace,
    results: dict[str, dict[str, Stats]],
    breakdown: dict[str, dict[str, float]],
    labels: dict[str, str],
    diffs: dict[str, float],
    anatomy: dict[str, float],
    rates: dict[str, float],
) -> str:
    small, resnet, transport = results["small"], results["resnet50"], results["transport"]
    added = small["binary"].p50_ms - small["raw"].p50_ms
    ratio = resnet["binary"].per_s / resnet["raw"].per_s
    best_raw = max(resnet["raw"].per_s, rates["raw, 2 threads"])
    best_served = max(resnet["binary"].per_s, rates["server binary, 2 clients"])
    peak_ratio = best_served / best_raw
    json_x = transport["json"].p50_ms / transport["binary"].p50_ms
    json_x_resnet = resnet["json"].p50_ms / resnet["binary"].p50_ms
    lines = [
        "# Serving benchmark: `graphgate serve` against onnxruntime in-process",
        "",
        f"`python benchmarks/bench_serving.py --small-runs {args.small_runs} --large-runs "
        f"{args.large_runs}` on {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"Python {platform.python_version()}, onnxruntime {ort.__version__} (CPU). Load average "
        f"(1 min) {args.load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: other "
        "work on the machine slows both sides, the ratios less than the absolute figures.",
        "",
        "A real `graphgate serve` process on loopback (uvicorn with uvloop and httptools, "
        "access log off (the default); per-tenant rate "
        "limit off so the benchmark's own rate is not throttled, everything else at its default: "
        "every inference runs in a worker process (2 workers, tensors through a shared-memory "
        "arena), and these models are batchable, so each request passes the dynamic batcher, "
        "whose queue delay is 0 by default: a lone request goes to a batch thread at once), "
        "one client on a persistent keep-alive connection (`http.client`, the leanest Python "
        "client; httpx2's extra cost is in the anatomy below), batch 1, one request at a time. "
        "Raw: the ONNX downloaded from the server's `/v1/models/{name}/versions/1/onnx`, run "
        "here with onnxruntime (CPU, intra-op threads = CPUs, inter-op 1: the server's settings). "
        "Request bodies are encoded once beforehand; decoding each answer is timed. Runs in "
        "blocks that take turns; throughput = 1 / mean latency.",
        "",
        "| model | path | p50 | p99 | throughput | p50 vs raw |",
        "|---|---|---|---|---|---|",
    ]
    for key, by_path in results.items():
        for path, s in by_path.items():
            delta = "" if path == "raw" else f"+{_ms(s.p50_ms - by_path['raw'].p50_ms)}"
            lines.append(
                f"| {labels[key]} | {path} | {_ms(s.p50_ms)} | {_ms(s.p99_ms)} | "
                f"{s.per_s:,.1f}/s | {delta} |"
            )
    lines += [
        "",
        "ResNet50 with 2 callers at once (raw: 2 threads sharing the session; server: 2 "
        "clients with a connection each): "
        + ", ".join(f"{k} {v:.1f}/s" for k, v in rates.items())
        + ".",
        "",
        "Server outputs against raw onnxruntime (max abs difference, binary and JSON): "
        + ", ".join(f"{k} {v:.3g}" for k, v in diffs.items())
        + ".",
        "",
        "## Goals",
        "",
        "| goal | figure | met |",
        "|---|---|---|",
        f"| added p50, small model, binary <= 1 ms | {added:.3f} ms | {_met(added <= 1)} |",
        f"| ResNet50 throughput server (binary) / raw >= 0.9, peak over 1 and 2 callers | "
        f"{peak_ratio:.3f} ({best_served:.1f}/s vs {best_raw:.1f}/s; one caller at a time: "
        f"{ratio:.3f}) | {_met(peak_ratio >= 0.9)} |",
        f"| JSON / binary p50 for a 1x3x224x224 input <= 10x | {json_x:.2f}x (transport model); "
        f"{json_x_resnet:.2f}x (ResNet50) | {_met(json_x <= 10)} |",
        "",
        "## Where the time goes (this process, no HTTP)",
        "",
        "Median of each layer a request crosses, on the same models, with a real worker pool "
        "(one worker) in this process: onnxruntime's `session.run` and the executor's "
        "`CompiledModel.run` (per-request scope: feed and output checks), run here as a worker "
        "runs them; `RemoteModel.run`, the worker round trip (feeds into the shared-memory "
        "arena, a pipe message, `CompiledModel.run` in the worker, outputs copied back); and "
        "`server.services.inference.infer` (V2 decode, worker run, encode) for binary and JSON "
        "bodies, unbatched. The rest of the served p50 is the batcher's hand-off and HTTP: "
        "uvicorn, the infer endpoint (key check, rate limit, concurrency slot, model lookup, "
        "metrics), a batch thread running the worker round trip while the loop awaits its answer, "
        "and loopback TCP.",
        "",
        "| model | " + " | ".join(next(iter(breakdown.values()))) + " | served p50 binary / JSON |",
        "|---|" + "---|" * (len(next(iter(breakdown.values()))) + 1),
    ]
    for key, steps in breakdown.items():
        served = f"{_ms(results[key]['binary'].p50_ms)} / {_ms(results[key]['json'].p50_ms)}"
        lines.append(
            f"| {labels[key]} | " + " | ".join(_ms(v) for v in steps.values()) + f" | {served} |"
        )
    lines += [
        "",
        "## Anatomy of a small-model request",
        "",
        "p50 of requests that cross more and more of the path, through the same server and "
        "client (blocks taking turns), and of the hot path's pieces every inference crosses, "
        "timed in this process on the server's data directory after it stopped, with a real "
        "worker pool: the key check and model lookup from the in-memory caches and from the "
        "database (SQLite via SQLAlchemy ORM), and the worker round trip of the model the "
        "lookup resolves:",
        "",
        "| step | p50 |",
        "|---|---|",
        *(f"| {step} | {_ms(ms)} |" for step, ms in anatomy.items()),
        "",
        *findings(anatomy, breakdown["small"]),
    ]
    return "\n".join(lines) + "\n"


def findings(anatomy: dict[str, float], layer_ms: dict[str, float]) -> list[str]:
    """What the anatomy says about the small model's added p50 (the measured figures only)."""
    live, ready, infer, via_httpx = (anatomy[k] for k in (LIVE, READY, INFER, VIA_HTTPX))
    auth, resolve, auth_db, resolve_db = (
        anatomy[k] for k in (KEY_CACHED, MODEL_CACHED, KEY_DB, MODEL_DB)
    )
    round_trip, service_ms = anatomy[ROUND_TRIP], layer_ms[SERVICE_BINARY]
    in_process = layer_ms["CompiledModel.run (scope checks)"]
    return [
        "Where the small model's added p50 goes:",
        "",
        f"- HTTP floor: {_ms(live)} for GET /v2/health/live (no dependencies) and {_ms(ready)} "
        "for model ready, whose dependencies (key check, rate limit, model lookup) all hit the "
        "in-memory caches: uvicorn (uvloop, httptools), FastAPI, the app's middlewares, "
        "loopback TCP and the client.",
        f"- Key check and model lookup: {_ms(auth + resolve)} from the caches (key "
        f"{_ms(auth)}, model {_ms(resolve)}); a miss (the first request of a key or model, or "
        f"one after the TTL) reads the database in the threadpool: key {_ms(auth_db)}, model "
        f"{_ms(resolve_db)} (the model row and all its versions).",
        f"- The worker round trip: {_ms(round_trip)} for the resolved model's RemoteModel.run "
        f"(arena, pipe, the run in the worker), against {_ms(in_process)} for the same "
        "CompiledModel.run in this process: the rest is the cost of crash isolation.",
        f"- The inference itself: +{_ms(infer - ready)} (infer over ready: reading the body, "
        "the concurrency slot, the hand-off to a batch thread and back, metrics, and the V2 "
        f"service, which takes {_ms(service_ms)} of it unbatched in-process: decode, worker "
        "round trip, encode; a small body decodes on the event loop).",
        f"- The client: the same infer through httpx2.Client takes {_ms(via_httpx)}, "
        f"{_ms(via_httpx - infer)} more than through http.client; that is the client library's "
        "cost, not the server's.",
    ]


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small-runs", type=int, default=2000, help="timed runs, small model")
    parser.add_argument("--large-runs", type=int, default=60, help="timed runs, 224x224 models")
    parser.add_argument("--threads", type=int, default=0, help="raw intra-op threads (0: CPUs)")
    parser.add_argument("--models", default="small,resnet50,transport", help="which to run")
    args = parser.parse_args()
    args.load_before = os.getloadavg()[0]
    chosen = args.models.split(",")
    all_cases = [c for c in cases(args.small_runs, args.large_runs) if c.key in chosen]
    labels = {c.key: c.label for c in all_cases}
    results: dict[str, dict[str, Stats]] = {}
    diffs: dict[str, float] = {}
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "data") as url:
        key = tenant_key(url)
        headers = {"Authorization": f"Bearer {key}"}
        conn = Connection(url, headers)
        with httpx2.Client(base_url=url, headers=headers, timeout=120) as client:
            for case in all_cases:
                print(f"{case.key}: uploading, then {case.runs} runs per path", flush=True)
                onnx = upload_and_download(client, case)
                raw, want = raw_runner(onnx, case, args.threads)
                binary, got_binary = binary_runner(conn, case)
                as_json, got_json = json_runner(conn, case)
                diffs[case.key] = max(
                    float(np.abs(got_binary - want).max()), float(np.abs(got_json - want).max())
                )
                block = max(5, case.runs // 10)
                times = timed({"raw": raw, "binary": binary, "JSON": as_json}, case.runs, block)
                results[case.key] = {
                    "raw": Stats.of(times["raw"]),
                    "binary": Stats.of(times["binary"]),
                    "json": Stats.of(times["JSON"]),
                }
                print(f"  {results[case.key]}", flush=True)
                if case.key == "resnet50":
                    rates = resnet_rates(url, headers, onnx, case, args.threads)
                    print(f"  {rates}", flush=True)
            if "small" in chosen:
                anatomy = served_anatomy(conn, client, all_cases[0])
        if "small" in chosen:
            anatomy |= lookups(Path(tmp) / "data", key, all_cases[0], args.small_runs // 2)
            print(f"  {anatomy}", flush=True)
    if set(results) != {"small", "resnet50", "transport"}:
        return  # a partial run (--models): the figures above, no report
    with worker_pool() as pool:
        breakdown = {c.key: layers(c, c.runs // 2, pool) for c in all_cases}
    text = report(args, results, breakdown, labels, diffs, anatomy, rates)
    # bench_loop_cost.py's section (the event loop's cost, base vs this) is its own: kept.
    kept = RESULTS.read_text().partition(LOOP_COST_SECTION)[2] if RESULTS.exists() else ""
    RESULTS.write_text(text + (f"\n{LOOP_COST_SECTION}{kept}" if kept else ""))
    print(text)


if __name__ == "__main__":
    main()
