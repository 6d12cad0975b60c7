"""graphgate against real peers on the same ONNX, driven by the same `tritonclient` client.

Usage: python benchmarks/bench_peers.py [--rounds 4] [--seconds 2] [--large-seconds 5]
                                        [--models small,image,resnet50] [--no-install] [--out F]
                                        [--protocols http,grpc] [--peers pytriton,mlserver,kserve]
                                        [--before CHECKOUT [--before-batching]] [--json]

Serves, on loopback, the ONNX graphgate made of each model (downloaded from graphgate through
`GET /v1/models/{name}/versions/1/onnx`) with:
  - raw:           onnxruntime in this process (c threads on one session; no HTTP at all)
  - graphgate:     `graphgate serve`, batching off (GRAPHGATE_BATCH_MAX_SIZE=0)
  - graphgate+batching: `graphgate serve` with its dynamic batcher (max batch 32, 200 us); the
                   validator proves the benchmarked models batchable (the upload report says
                   `batchable: true`, checked here), so they batch as any tenant's would; the
                   table says the rows per run it reached (its /metrics, per cell)
  - graphgate before / graphgate+batching (before): with `--before CHECKOUT`, the same server
                   run from another checkout's code (e.g. /work/wt-base), a "before" in the same
                   rounds, unbatched or, with `--before-batching`, batched
  - pytriton / pytriton+db: nvidia-pytriton 0.7.0 (Triton's C++ HTTP frontend, onnxruntime in
                   the callable), without and with dynamic batching (max batch 32, 200 us)
  - mlserver:      MLServer 1.7.1 with a small custom onnxruntime runtime
  - kserve:        KServe 0.21.0 ModelServer, a custom Model running onnxruntime
  - noop:          a V2 endpoint that does nothing: the client's own ceiling
Each peer lives in its own virtual environment, benchmarks/.venv-<peer>, made by this script
(never a graphgate dependency). Every server's answer is checked against raw onnxruntime first.
Cells are (model, concurrency c in 1, 8, 32); in each cell the targets take turns in rounds,
A B C ... then ... C B A, and the table holds the medians over rounds of p50, p99 and req/s.
A target's turn lasts the same time for every server (`--seconds`): every client keeps sending
until then (a fixed count per client would leave the fast ones idle while the last finish).
Each of c client threads has its own tritonclient.http client (binary tensors where the server
takes them; MLServer's and KServe's REST answer JSON, noted in the table).
With `--protocols` naming grpc, every server that speaks KServe V2 over gRPC (graphgate on its
GRAPHGATE_GRPC_PORT, PyTriton, MLServer and KServe on their HTTP port + 1) is also a target
`<name> gRPC`, driven by `tritonclient.grpc` (raw tensor contents), in the same rounds.
`--before TREE` adds graphgate served from another checkout (over HTTP and, with grpc, gRPC) to
the same rounds: a change's before and after side by side.
With `--json`, graphgate and PyTriton are also targets `<name> JSON`: the same tritonclient.http
client sending and asking for JSON tensors (`binary_data=False`), in the same rounds; the model
`transport` (mean of x[1, 3, 224, 224]: no compute, a 3 MB JSON request) is the one to run them on.
Writes benchmarks/results/peers.md.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results" / "peers.md"
PEERS = BENCH / "peers"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import gevent  # noqa: E402
import httpx2  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tritonclient.grpc as triton_grpc  # noqa: E402
import tritonclient.http as triton_http  # noqa: E402
from geventhttpclient.response import HTTPParseError  # noqa: E402

from graph_proto.types import DType  # noqa: E402
from tests.support.builders import GraphBuilder, V, mlp  # noqa: E402

ADMIN_TOKEN = "bench-admin-token-0123456789abcdef0123456789"
# PyTriton 0.7.0's Triton Python-backend stub embeds an older libpython 3.11 than 3.11.7, whose
# multiprocessing then fails in the stub (RLock._recursion_count): its venv gets Python 3.10.
PYTHONS = {"pytriton": "python3.10"}
INSTALL = {
    "pytriton": ["nvidia-pytriton==0.7.0"],
    "mlserver": ["mlserver==1.7.1"],
    "kserve": ["kserve==0.21.0"],
}
DATATYPES = {"tensor(float)": "FP32", "tensor(int64)": "INT64", "tensor(int32)": "INT32"}
CEILING: Final = "client ceiling (no-op server)"
# --before TREE: graphgate served from another tree, unbatched or (--before-batching) batched.
BEFORE: Final = "graphgate before"
BEFORE_BATCHED: Final = "graphgate+batching (before)"


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    program: bytes
    params: bytes | None
    x: np.ndarray  # one request's input (batch 1)
    seconds: float  # per cell, per target, per round


@dataclass
class Target:
    name: str
    url: str  # host:port; "" for raw onnxruntime in process
    model: Callable[[str], str] = lambda key: key
    headers: dict[str, str] = field(default_factory=dict)
    binary: bool = True
    grpc: bool = False  # KServe V2 over gRPC (tritonclient.grpc) instead of HTTP

    def over_grpc(self, url: str) -> Target:
        """The same server and models over gRPC at `url` (the key as `authorization`)."""
        headers = {k.lower(): v for k, v in self.headers.items()}
        return Target(f"{self.name} gRPC", url, self.model, headers, grpc=True)


# -- setting up ----------------------------------------------------------------------------


def cases(turn: float, large_turn: float, which: list[str]) -> list[Case]:
    """The models; `turn` (ResNet50: `large_turn`) is what a target's turn lasts, in seconds
    (`Case.seconds`)."""
    import bench_executor

    rng = np.random.default_rng(0)
    small = mlp((16, 16)).built()
    example = ROOT / "examples" / "image_classifier"
    image = np.load(example / "image.npy")[:1].astype(np.float32)
    all_cases = [
        Case("small", "fc 16->16 + softmax, x[1, 16]", small.program, small.params,
             rng.standard_normal((1, 16)).astype(np.float32), turn),
        Case("image", "examples/image_classifier, image[1, 3, 32, 32]",
             (example / "model.pdmodel").read_bytes(), (example / "model.pdiparams").read_bytes(),
             image, turn),
    ]  # fmt: skip
    if "transport" in which:
        transport = transport_model().built()
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        all_cases.append(Case("transport", "no compute (channel means), x[1, 3, 224, 224]",
                              transport.program, transport.params, x, turn))  # fmt: skip
    if "resnet50" in which:
        (resnet,) = [m for m in bench_executor.MODELS if m.key == "resnet50"]
        program, params = bench_executor.model_files([resnet])["resnet50"]
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        all_cases.append(Case("resnet50", "ResNet50, image[1, 3, 224, 224]",
                              program.read_bytes(), params.read_bytes(), x, large_turn))  # fmt: skip
    return [c for c in all_cases if c.key in which]


def transport_model() -> GraphBuilder:
    """x FP32[-1, 3, 224, 224] to its channel means [-1, 3]: only the request is big. (Not
    bench_serving's mean to [-1]: Triton refuses a batched model's output without dims.)"""
    g = GraphBuilder()
    g.feed("x", DType.FP32, [-1, 3, 224, 224])
    attrs = {"dim": [2, 3], "keep_dim": False, "reduce_all": False}
    g.node("reduce_mean", {"X": ["x"]}, {"Out": [V("mean", [-1, 3])]}, attrs)
    g.fetch("mean")
    return g


def venv(peer: str, install: bool) -> Path:
    """benchmarks/.venv-<peer> with the peer, onnxruntime and numpy (made once)."""
    home = BENCH / f".venv-{peer}"
    if not (home / ".installed").exists():
        if not install:
            raise SystemExit(f"{home} is missing: run without --no-install")
        python = interpreter(PYTHONS.get(peer, "python3.11"))
        subprocess.run([python, "-m", "venv", str(home)], check=True)
        pip = [str(home / "bin" / "pip"), "install", "-q", *INSTALL[peer], "onnxruntime", "numpy"]
        subprocess.run(pip, check=True)
        (home / ".installed").touch()
    return home / "bin" / "python"


def interpreter(name: str) -> str:
    """`name` (e.g. python3.10) as a path: on PATH when it runs there, else a pyenv install of
    it (pyenv's shim for a version that is not the global one exits 127)."""
    try:
        if subprocess.run([name, "--version"], capture_output=True, check=False).returncode == 0:
            return name
    except FileNotFoundError:
        pass
    version = name.removeprefix("python")
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(pyenv.glob(f"{version}.*/bin/{name}"))
    if not found:
        raise SystemExit(f"{name} is needed for a peer's venv: install it (e.g. pyenv install)")
    return str(found[-1])


def shared_libpython(python: str) -> dict[str, str]:
    """LD_LIBRARY_PATH with the venv's libpython folder first: Triton's Python-backend stub
    links libpython3.x.so, which a pyenv-built interpreter keeps outside the loader's path."""
    query = "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"
    libdir = subprocess.run([python, "-c", query], capture_output=True, text=True, check=True)
    paths = [libdir.stdout.strip(), os.environ.get("LD_LIBRARY_PATH", "")]
    return {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, paths))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def free_ports(n: int) -> int:
    """A port p with p .. p+n-1 free (peers take http, grpc and metrics ports in a row)."""
    while True:
        port = free_port()
        try:
            for i in range(n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + i))
            return port
        except OSError:
            continue


@contextmanager
def process(command: list[str], ready: str, env: dict[str, str] | None = None) -> Iterator[None]:
    """Runs a server until `ready` (a URL) answers 200; stops it afterwards."""
    log = tempfile.NamedTemporaryFile(prefix="bench-peer-", suffix=".log", delete=False)  # noqa: SIM115
    child = subprocess.Popen(command, cwd=PEERS, env={**os.environ, **(env or {})},
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx2.get(ready, timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if child.poll() is not None or time.monotonic() > deadline:
                tail = Path(log.name).read_text()[-3000:]
                raise SystemExit(f"{command[:3]} did not start:\n{tail}")
            time.sleep(0.5)
        yield
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


def graphgate(
    stack: ExitStack, batching: bool, data: Path, root: Path = ROOT
) -> tuple[str, str, str]:
    """A `graphgate serve` of `root`'s code, its dynamic batcher on or off: its HTTP and gRPC
    addresses, the key."""
    port, grpc_port = free_port(), free_port()
    env = {
        "GRAPHGATE_GRPC_PORT": str(grpc_port),
        "GRAPHGATE_ADMIN_TOKEN": ADMIN_TOKEN,
        "GRAPHGATE_TENANT_RATE_PER_S": "0",
        "GRAPHGATE_BATCH_MAX_SIZE": "32" if batching else "0",
        "GRAPHGATE_BATCH_MAX_QUEUE_DELAY_US": "200",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "server.cli", "serve", "--port", str(port),
               "--data-dir", str(data)]  # fmt: skip
    url = f"127.0.0.1:{port}"
    stack.enter_context(process(command, f"http://{url}/v2/health/ready", env))
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    made = httpx2.post(f"http://{url}/v1/admin/tenants", json={"name": "bench"}, headers=admin)
    made.raise_for_status()
    return url, f"127.0.0.1:{grpc_port}", made.json()["key"]


def upload(url: str, key: str, case: Case) -> bytes:
    client = httpx2.Client(base_url=f"http://{url}", headers={"Authorization": f"Bearer {key}"})
    files = {"program": case.program} | ({"params": case.params} if case.params else {})
    uploaded = client.post("/v1/models", data={"name": case.key}, files=files, timeout=600)
    if uploaded.status_code != 201:
        raise SystemExit(f"upload of {case.key} failed: {uploaded.text[:500]}")
    if not uploaded.json()["report"].get("batchable"):
        raise SystemExit(
            f"{case.key}: the validator does not prove it batchable; it would not batch"
        )
    onnx = client.get(f"/v1/models/{case.key}/versions/1/onnx", timeout=120)
    onnx.raise_for_status()
    return onnx.content


def signature(onnx: bytes) -> dict[str, Any]:
    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])

    def spec(t: Any) -> dict[str, Any]:
        shape = [d if isinstance(d, int) else -1 for d in t.shape]
        return {"name": t.name, "datatype": DATATYPES[t.type], "shape": shape}

    return {
        "inputs": [spec(t) for t in session.get_inputs()],
        "outputs": [spec(t) for t in session.get_outputs()],
    }


# -- measuring -----------------------------------------------------------------------------


def raw_session(onnx: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])


STALE_CONNECTION: Final = (HTTPParseError, ConnectionError)


class Retries:
    """Requests sent again after a STALE_CONNECTION, per target (the table says how many)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_target: dict[str, int] = {}

    def add(self, target: str) -> None:
        with self._lock:
            self.by_target[target] = self.by_target.get(target, 0) + 1


RETRIES = Retries()


def batch_rows(target: Target) -> tuple[float, float]:
    """(rows, runs) the graphgate server behind `target` has batched so far, over every model
    (its /metrics `graphgate_batch_size` sum and count)."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    text = httpx2.get(f"http://{target.url}/metrics", headers=admin, timeout=10).text
    rows = runs = 0.0
    for line in text.splitlines():
        if line.startswith("graphgate_batch_size_sum"):
            rows += float(line.rsplit(" ", 1)[1])
        elif line.startswith("graphgate_batch_size_count"):
            runs += float(line.rsplit(" ", 1)[1])
    return rows, runs


# gRPC targets that answered typed `contents` rather than raw_output_contents (tritonclient.grpc's
# as_numpy reads raw ones only): their answers are read from the typed field, and the table
# says which they were, as it says which took JSON over HTTP.
TYPED_GRPC: set[str] = set()
TYPED_FIELDS: Final = {"FP32": "fp32_contents", "INT64": "int64_contents", "INT32": "int_contents"}


def grpc_output(answer: Any, name: str, target: str) -> np.ndarray:
    """Output `name` of a tritonclient.grpc answer, raw or typed."""
    response = answer.get_response()
    if response.raw_output_contents:
        value: np.ndarray = answer.as_numpy(name)
        return value
    TYPED_GRPC.add(target)
    (out,) = [o for o in response.outputs if o.name == name]
    values = getattr(out.contents, TYPED_FIELDS[out.datatype])
    return np.array(values, np.float32).reshape(list(out.shape))


class Caller:
    """One client's request function (its own connection); `close()` closes the connection.

    NOTE: closed at the end of every turn. Dropped unclosed, each tritonclient.http client
    left its gevent hub and sockets open (fds grew by ~64 a turn at 32 clients, against
    servers that keep idle connections, as Triton's frontend does); past ~1,000 open fds the
    client process spent ~3x its CPU per request, and every server's cell after that point
    measured the client (the "client ceiling collapse" of earlier results)."""

    def __init__(
        self, target: Target, case: Case, sig: dict[str, Any], raw: ort.InferenceSession
    ) -> None:
        feed = sig["inputs"][0]["name"]
        self._output = output = sig["outputs"][0]["name"]
        self._target = target.name
        self._client: Any = None
        if not target.url:
            self._call: Callable[[], Any] = lambda: raw.run([output], {feed: case.x})[0]
            return
        if target.grpc:
            self._call = self._grpc_call(target, case, feed, output)
            return
        self._client = triton_http.InferenceServerClient(target.url, network_timeout=300.0)
        given = triton_http.InferInput(feed, list(case.x.shape), "FP32")
        given.set_data_from_numpy(case.x, binary_data=target.binary)
        wanted = [triton_http.InferRequestedOutput(output, binary_data=target.binary)]
        model, client, headers = target.model(case.key), self._client, target.headers
        self._call = lambda: client.infer(model, [given], outputs=wanted, headers=headers)

    def _grpc_call(self, target: Target, case: Case, feed: str, output: str) -> Callable[[], Any]:
        """One request over gRPC: raw contents in and out (tritonclient.grpc's only way)."""
        self._client = client = triton_grpc.InferenceServerClient(target.url)
        given = triton_grpc.InferInput(feed, list(case.x.shape), "FP32")
        given.set_data_from_numpy(case.x)
        wanted = [triton_grpc.InferRequestedOutput(output)]
        model, headers = target.model(case.key), target.headers
        return lambda: client.infer(model, [given], outputs=wanted, headers=headers)

    def __call__(self) -> np.ndarray:
        try:
            answer = self._call()
        except STALE_CONNECTION:
            # A keep-alive connection the server closed while this client sat idle (a warm-up
            # of 32 ResNet50 clients leaves some idle past uvicorn's 5 s keep-alive): tried
            # again once on a new connection, as a browser would; the time counts.
            RETRIES.add(self._target)
            answer = self._call()
        if self._client is None:
            return answer
        if isinstance(self._client, triton_grpc.InferenceServerClient):
            return grpc_output(answer, self._output, self._target)
        value: np.ndarray = answer.as_numpy(self._output)
        return value

    def close(self) -> None:
        """Closes the connection and this thread's gevent hub (call it in the calling thread)."""
        if isinstance(self._client, triton_grpc.InferenceServerClient):
            self._client.close()  # a grpc channel: no gevent hub of its own
        elif self._client is not None:
            self._client.close()
            # gevent asks code using it from several native threads to destroy each thread's
            # hub (the client made this thread's): it holds an event loop's fds and a resolver
            # thread otherwise.
            gevent.get_hub().destroy(destroy_loop=True)


def answer_once(
    target: Target, case: Case, sig: dict[str, Any], raw: ort.InferenceSession
) -> np.ndarray:
    one = Caller(target, case, sig, raw)
    try:
        return one()
    finally:
        one.close()


@dataclass
class Cell:
    p50_ms: float
    p99_ms: float
    per_s: float
    rows: float = 0.0  # rows and runs the server batched in this turn (warm-up included)
    runs: float = 0.0


class Clients:
    """c client threads, each with its own connection made in that thread (tritonclient.http is
    gevent-based: a client serves only the thread that made it), kept across rounds."""

    def __init__(self, make: Callable[[], Caller], c: int) -> None:
        # A job: ("count", n) requests, or ("until", t) keep sending until perf_counter() t.
        self._jobs: list[queue.Queue[tuple[str, float] | None]] = [queue.Queue() for _ in range(c)]
        self._done: queue.Queue[list[float] | BaseException] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._client, args=(make, jobs), daemon=True)
            for jobs in self._jobs
        ]
        for thread in self._threads:
            thread.start()

    def _client(self, make: Callable[[], Caller], jobs: Any) -> None:
        call = make()
        try:
            self._serve(call, jobs)
        finally:
            call.close()

    def _serve(self, call: Caller, jobs: Any) -> None:
        while (job := jobs.get()) is not None:
            kind, value = job
            try:
                mine: list[float] = []
                while len(mine) < value if kind == "count" else time.perf_counter() < value:
                    start = time.perf_counter()
                    call()
                    mine.append(time.perf_counter() - start)
                self._done.put(mine)
            except BaseException as error:
                self._done.put(error)

    def measure_for(self, seconds: float) -> Cell:
        """All clients at once, each sending until `seconds` have passed; latencies of every
        request, the rate over the time until the last answer."""
        return self._measure(("until", time.perf_counter() + seconds))

    def measure(self, requests: int) -> Cell:
        """All clients at once, `requests` in all; latencies of every request."""
        return self._measure(("count", max(1, requests // len(self._jobs))))

    def _measure(self, job: tuple[str, float]) -> Cell:
        start = time.perf_counter()
        for jobs in self._jobs:
            jobs.put(job)
        latencies: list[float] = []
        for _ in self._jobs:
            got = self._done.get()
            if isinstance(got, BaseException):
                raise got
            latencies.extend(got)
        wall = time.perf_counter() - start
        ordered = sorted(latencies)
        return Cell(
            1e3 * ordered[len(ordered) // 2],
            1e3 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            len(ordered) / wall,
        )

    def close(self) -> None:
        """Ends every client thread, each closing its connection, and waits for them."""
        for jobs in self._jobs:
            jobs.put(None)
        for thread in self._threads:
            thread.join()


def wait_ready(target: Target, model: str) -> None:
    """Until the server says `model` is ready (a peer may load its models one by one)."""
    deadline = time.monotonic() + 120
    if target.grpc:
        client = triton_grpc.InferenceServerClient(target.url)
        try:
            while not _grpc_ready(client, model, target.headers):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{target.name}: {model} not ready after 120 s")
                time.sleep(0.5)
        finally:
            client.close()
        return
    url = f"http://{target.url}/v2/models/{model}/ready"
    # tritonclient adds its own entries (an int among them) to the headers it is given
    auth = {k: v for k, v in target.headers.items() if k == "Authorization"}
    while httpx2.get(url, headers=auth, timeout=5).status_code != 200:
        if time.monotonic() > deadline:
            raise SystemExit(f"{target.name}: {model} not ready after 120 s")
        time.sleep(0.5)


def _grpc_ready(client: Any, model: str, headers: dict[str, str]) -> bool:
    try:
        return bool(client.is_model_ready(model, headers=headers))
    except triton_grpc.InferenceServerException:  # not listening yet, or loading
        return False


def turn(make: Callable[[], Caller], c: int, seconds: float) -> Cell:
    """One target's turn: c fresh clients (connections made and warmed, untimed), `seconds`
    measured, then closed.

    NOTE: fresh per turn, not kept across the turns of a cell, so that only the measured
    target's clients (threads, keep-alive connections) are alive in the client process, and
    they are closed before the next turn (see Caller)."""
    clients = Clients(make, c)
    try:
        clients.measure(4 * c)  # warm-up: connections, sessions, batchers
        return clients.measure_for(seconds)
    finally:
        clients.close()


def check(target: Target, case: Case, sig: dict[str, Any], raw: ort.InferenceSession) -> None:
    """The server answers what onnxruntime answers (float32, rtol 1e-4); binary falls back to
    JSON when the server does not take binary tensors."""
    expected = answer_once(Target("raw", ""), case, sig, raw)
    try:
        got = answer_once(target, case, sig, raw)
    except Exception:
        if not target.binary or target.grpc:
            raise
        target.binary = False
        got = answer_once(target, case, sig, raw)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6, err_msg=target.name)


# -- the run -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    which = args.models.split(",")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    chosen = cases(args.seconds, args.large_seconds, which)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plain_url, plain_grpc, plain_key = graphgate(stack, False, work / "plain")
        batch_url, batch_grpc, batch_key = graphgate(stack, True, work / "batch")
        before, before_grpc = None, ""
        if args.before:  # the same server from another tree (before a change)
            before_url, before_grpc, before_key = graphgate(
                stack, args.before_batching, work / "before", Path(args.before)
            )
            before = Target(BEFORE_BATCHED if args.before_batching else BEFORE, before_url,
                            headers={"Authorization": f"Bearer {before_key}"})  # fmt: skip
        protocols = set(args.protocols.split(","))
        sigs: dict[str, dict[str, Any]] = {}
        raws: dict[str, ort.InferenceSession] = {}
        for case in chosen:
            onnx = upload(plain_url, plain_key, case)
            upload(batch_url, batch_key, case)
            if before is not None:
                upload(before.url, before.headers["Authorization"].split()[1], case)
            (work / f"{case.key}.onnx").write_bytes(onnx)
            sigs[case.key] = signature(onnx)
            raws[case.key] = raw_session(onnx)
        (work / "models.json").write_text(json.dumps(sigs))
        plain = Target("graphgate", plain_url, headers={"Authorization": f"Bearer {plain_key}"})
        batched = Target("graphgate+batching", batch_url,
                         headers={"Authorization": f"Bearer {batch_key}"})  # fmt: skip
        targets = [Target("raw onnxruntime", ""), plain, batched, *filter(None, [before])]
        if "grpc" in protocols:
            targets += [plain.over_grpc(plain_grpc), batched.over_grpc(batch_grpc)]
            if before is not None:
                targets.append(before.over_grpc(before_grpc))
        for peer in filter(None, args.peers.split(",")):
            port = free_ports(3)
            python = str(venv(peer, not args.no_install))
            ready = f"http://127.0.0.1:{port}/v2/models/{chosen[0].key}/ready"
            command = [python, str(PEERS / f"{peer}_server.py"), str(work), str(port)]
            stack.enter_context(process(command, ready, shared_libpython(python)))
            peer_targets = [Target(peer, f"127.0.0.1:{port}")]
            if peer == "pytriton":
                url = f"127.0.0.1:{port}"
                peer_targets.append(Target("pytriton+batching", url, model=lambda key: f"{key}_db"))
            if "grpc" in protocols:  # every peer serves V2 gRPC on its HTTP port + 1
                grpc_url = f"127.0.0.1:{port + 1}"
                peer_targets += [t.over_grpc(grpc_url) for t in peer_targets]
            targets += peer_targets
        if args.json:
            targets += [as_json(t) for t in targets if t.name in ("graphgate", "pytriton")]
        noop_port = free_port()
        noop = [sys.executable, str(PEERS / "noop_server.py"), str(noop_port)]
        stack.enter_context(process(noop, f"http://127.0.0.1:{noop_port}/v2/health/ready"))
        ceilings = [Target(CEILING, f"127.0.0.1:{noop_port}")]
        if "grpc" in protocols:
            noop_grpc_port = free_port()
            noop_grpc = [sys.executable, str(PEERS / "noop_grpc_server.py"), str(noop_grpc_port)]
            # it has no HTTP to be asked on: `process` takes the HTTP no-op's (up already), and
            # wait_ready asks this one over gRPC
            stack.enter_context(process(noop_grpc, f"http://127.0.0.1:{noop_port}/v2/health/ready"))
            ceilings.append(Target(f"{CEILING} gRPC", f"127.0.0.1:{noop_grpc_port}", grpc=True))
            wait_ready(ceilings[-1], "noop")
        for case in chosen:
            for target in targets[1:]:
                wait_ready(target, target.model(case.key))
                check(target, case, sigs[case.key], raws[case.key])
        targets += ceilings
        results: dict[tuple[str, int, str], list[Cell]] = {}
        # The client's own full garbage collections (onnxruntime, numpy, tritonclient and
        # gevent make a big heap) stalled all its threads for ~50 ms: a p99 of the client's,
        # charged to whichever server had its turn. What setup made lives until the end.
        gc.collect()
        gc.freeze()
        for case in chosen:
            for c in concurrencies:
                for r in range(args.rounds):
                    order = targets if r % 2 == 0 else targets[::-1]
                    for t in order:
                        make = functools.partial(Caller, t, case, sigs[case.key], raws[case.key])
                        batches = t.name.startswith("graphgate+batching") and not t.grpc
                        start = batch_rows(t) if batches else (0.0, 0.0)
                        cell = turn(make, c, case.seconds)
                        if batches:
                            end = batch_rows(t)
                            cell.rows, cell.runs = end[0] - start[0], end[1] - start[1]
                        results.setdefault((case.key, c, t.name), []).append(cell)
                        print(f"{case.key} c={c} round {r} {t.name}: {cell}", flush=True)
        write(args, chosen, concurrencies, targets, results)


def as_json(target: Target) -> Target:
    """The same server and models, sent and asked JSON tensors.

    NOTE: its own headers dict: tritonclient adds Inference-Header-Content-Length to the dict
    it is given for a binary request, which a shared one would then send with JSON too."""
    headers = dict(target.headers)
    return Target(f"{target.name} JSON", target.url, target.model, headers, binary=False)


def median(cells: list[Cell]) -> Cell:
    """Medians of the latencies and rates; rows and runs summed over the rounds."""
    return Cell(
        statistics.median(c.p50_ms for c in cells),
        statistics.median(c.p99_ms for c in cells),
        statistics.median(c.per_s for c in cells),
        sum(c.rows for c in cells),
        sum(c.runs for c in cells),
    )


def write(
    args: argparse.Namespace,
    chosen: list[Case],
    concurrencies: list[int],
    targets: list[Target],
    results: dict[tuple[str, int, str], list[Cell]],
) -> None:
    cpu = platform.processor() or platform.machine()
    lines = [
        "# graphgate against peers (benchmarks/bench_peers.py)",
        "",
        f"`python benchmarks/bench_peers.py --rounds {args.rounds} --seconds {args.seconds} "
        f"--large-seconds {args.large_seconds} --models {args.models} --concurrency "
        f"{args.concurrency} --peers '{args.peers}' --protocols {args.protocols}"
        f"{f' --before {args.before}' if args.before else ''}"
        f"{' --before-batching' if args.before_batching else ''}"
        f"{' --json' if args.json else ''}`; "
        f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        f"onnxruntime {ort.__version__}, CPU provider, 1 intra-op thread per session, loopback.",
        "",
        "Medians over interleaved rounds (A B C ..., then ... C B A) of p50 / p99 latency and "
        "requests/s; each of c client threads has its own `tritonclient.http` client "
        "(`tritonclient.grpc` for the `gRPC` rows; the ratio columns compare with graphgate's "
        "REST rows). "
        "`graphgate+batching` runs graphgate's dynamic batcher (max batch 32, 200 us) on models "
        "the validator proves batchable (`batchable: true` in the upload report). "
        "Binary tensors where the server takes them "
        f"(JSON for: {', '.join(t.name for t in targets if not t.binary) or 'none'}; typed "
        f"gRPC contents from: {', '.join(sorted(TYPED_GRPC)) or 'none'}). "
        "Requests sent again on a keep-alive connection the server had closed while the client "
        f"was idle (their time counts): {RETRIES.by_target or 'none'}.",
        "",
    ]
    for case in chosen:
        lines += [f"## {case.label}", "", "| server | c | p50 ms | p99 ms | req/s | graphgate/peer "
                  "req/s | graphgate+batching/peer req/s | rows per run |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for c in concurrencies:
            plain = median(results[(case.key, c, "graphgate")])
            batched = median(results[(case.key, c, "graphgate+batching")])
            for t in targets:
                m = median(results[(case.key, c, t.name)])
                per_run = f"{m.rows / m.runs:.1f}" if m.runs else ""
                lines.append(
                    f"| {t.name} | {c} | {m.p50_ms:.2f} | {m.p99_ms:.2f} | {m.per_s:.0f} | "
                    f"{plain.per_s / m.per_s:.2f} | {batched.per_s / m.per_s:.2f} | {per_run} |"
                )
        lines.append("")
    lines += goals(chosen, concurrencies, results)
    lines += tail_goals(chosen, concurrencies, targets, results)
    lines += grpc_goals(chosen, concurrencies, targets, results)
    lines += json_goals(chosen, concurrencies, targets, results)
    out = Path(args.out)
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


def goals(
    chosen: list[Case], concurrencies: list[int], results: dict[tuple[str, int, str], list[Cell]]
) -> list[str]:
    """The batching goals, from this run's medians: the two small models at 8 and 32 clients."""
    cells = [(case, c) for case in chosen if case.key in ("small", "image") for c in concurrencies
             if c in (8, 32) and (case.key, c, "pytriton+batching") in results]  # fmt: skip
    if not cells:
        return []

    def m(case: Case, c: int, name: str) -> Cell:
        return median(results[(case.key, c, name)])

    def row(goal: str, cell: Callable[[Case, int], str]) -> str:
        return f"| {goal} | " + " | ".join(cell(case, c) for case, c in cells) + " |"

    batched, plain, peer = "graphgate+batching", "graphgate", "pytriton+batching"
    return [
        "## Against the issue's goals (this run)",
        "",
        "| goal | " + " | ".join(f"{case.key}, c={c}" for case, c in cells) + " |",
        "|---|" + "---|" * len(cells),
        row("batching vs graphgate unbatched, req/s (goal >= 2x at c=32)",
            lambda case, c: f"{m(case, c, batched).per_s / m(case, c, plain).per_s:.2f}x"),
        row("batching p99 vs unbatched p99, ms (goal: no worse)",
            lambda case, c: f"{m(case, c, batched).p99_ms:.1f} vs {m(case, c, plain).p99_ms:.1f}"),
        row("graphgate+batching vs PyTriton+batching, req/s (goal >= 1.3x)",
            lambda case, c: f"{m(case, c, batched).per_s / m(case, c, peer).per_s:.2f}x"),
        row("p99 vs PyTriton+batching, ms (goal: lower)",
            lambda case, c: f"{m(case, c, batched).p99_ms:.1f} vs {m(case, c, peer).p99_ms:.1f}"),
        row("client ceiling (no-op server), req/s",
            lambda case, c: f"{m(case, c, CEILING).per_s:.0f}"),
        "",
    ]  # fmt: skip


def tail_goals(
    chosen: list[Case],
    concurrencies: list[int],
    targets: list[Target],
    results: dict[tuple[str, int, str], list[Cell]],
) -> list[str]:
    """Issue #25's batching tail at 32 clients: req/s and p99 of each graphgate target and of
    PyTriton's batcher, and the checks (batched p99 no worse than unbatched nor than PyTriton+
    batching; req/s within 5% of the "before" server's, when there is one)."""
    names = [t.name for t in targets]
    shown = [n for n in ("graphgate", "graphgate+batching", BEFORE_BATCHED, "pytriton+batching")
             if n in names]  # fmt: skip
    if 32 not in concurrencies:
        return []
    lines = ["## Batching at 32 clients (issue #25: the tail under batching)", "",
             "| model | " + " | ".join(f"{n} req/s, p99 ms" for n in shown)
             + " | batched p99 <= unbatched | <= pytriton+batching | req/s vs before |",
             "|---|" + "---|" * (len(shown) + 3)]  # fmt: skip
    for case in chosen:
        m = {n: median(results[(case.key, 32, n)]) for n in shown}
        ours = m["graphgate+batching"]
        checks = [
            "-" if n not in m else "yes" if ours.p99_ms <= m[n].p99_ms else "no"
            for n in ("graphgate", "pytriton+batching")
        ]
        ratio = f"{ours.per_s / m[BEFORE_BATCHED].per_s:.2f}x" if BEFORE_BATCHED in m else "-"
        cells = " | ".join(f"{m[n].per_s:.0f}, {m[n].p99_ms:.1f}" for n in shown)
        lines.append(f"| {case.key} | {cells} | {' | '.join(checks)} | {ratio} |")
    return [*lines, ""]


def grpc_goals(
    chosen: list[Case],
    concurrencies: list[int],
    targets: list[Target],
    results: dict[tuple[str, int, str], list[Cell]],
) -> list[str]:
    """The gRPC goals, from this run's medians, for the rows this run has."""
    names = {t.name for t in targets}
    if "graphgate gRPC" not in names:
        return []

    def m(case: Case, c: int, name: str) -> Cell:
        return median(results[(case.key, c, name)])

    lines = ["## KServe V2 over gRPC against the goals (this run)", "",
             "| goal | model | measured |", "|---|---|---|"]  # fmt: skip
    for case in chosen:
        if 1 in concurrencies:
            rest, grpc = m(case, 1, "graphgate"), m(case, 1, "graphgate gRPC")
            lines.append(f"| c=1 p50: gRPC no worse than REST binary | {case.key} | "
                         f"{grpc.p50_ms:.2f} vs {rest.p50_ms:.2f} ms "
                         f"({grpc.p50_ms / rest.p50_ms:.2f}x) |")  # fmt: skip
            if f"{BEFORE} gRPC" in names:
                before = m(case, 1, f"{BEFORE} gRPC")
                lines.append(f"| (c=1 p50 over gRPC, `--before` tree -> this tree) | {case.key} | "
                             f"{before.p50_ms:.2f} -> {grpc.p50_ms:.2f} ms |")  # fmt: skip
            floor, grpc_floor = m(case, 1, CEILING), m(case, 1, f"{CEILING} gRPC")
            lines.append(f"| (the clients' own floor at c=1: no-op servers, p50) | {case.key} | "
                         f"gRPC {grpc_floor.p50_ms:.2f} vs HTTP {floor.p50_ms:.2f} ms |")  # fmt: skip
        if 32 not in concurrencies:
            continue
        if f"{BEFORE} gRPC" in names:
            before, after = m(case, 32, f"{BEFORE} gRPC"), m(case, 32, "graphgate gRPC")
            lines.append(f"| (c=32 req/s over gRPC, unbatched, `--before` tree -> this tree) | "
                         f"{case.key} | {before.per_s:.0f} -> {after.per_s:.0f} |")  # fmt: skip
        ours = m(case, 32, "graphgate+batching gRPC")
        if "pytriton+batching gRPC" in names:
            peer = m(case, 32, "pytriton+batching gRPC")
            lines.append(f"| c=32 req/s: >= 1.3x PyTriton+batching over gRPC | {case.key} | "
                         f"{ours.per_s / peer.per_s:.2f}x |")  # fmt: skip
        peers = [
            t.name
            for t in targets
            if t.grpc and not t.name.startswith("graphgate") and not t.name.startswith(CEILING)
        ]
        for name in peers:
            theirs = m(case, 32, name)
            lines.append(f"| c=32 p99 lower than {name} | {case.key} | "
                         f"{ours.p99_ms:.1f} vs {theirs.p99_ms:.1f} ms |")  # fmt: skip
    return [*lines, ""]


def json_goals(
    chosen: list[Case],
    concurrencies: list[int],
    targets: list[Target],
    results: dict[tuple[str, int, str], list[Cell]],
) -> list[str]:
    """The JSON goals (issue 25), from this run's medians at c=1, for the rows this run has."""
    names = {t.name for t in targets}
    if "graphgate JSON" not in names or 1 not in concurrencies:
        return []
    lines = ["## JSON tensors against the goals (this run, c=1, p50)", "",
             "| model | graphgate JSON / binary (goal <= 5x) | graphgate JSON vs PyTriton JSON "
             "(goal: no slower) |", "|---|---|---|"]  # fmt: skip
    for case in chosen:
        ours = median(results[(case.key, 1, "graphgate JSON")]).p50_ms
        binary = median(results[(case.key, 1, "graphgate")]).p50_ms
        peer = "n/a"
        if "pytriton JSON" in names:
            theirs = median(results[(case.key, 1, "pytriton JSON")]).p50_ms
            peer = f"{ours:.2f} vs {theirs:.2f} ms ({ours / theirs:.2f}x)"
        lines.append(f"| {case.key} | {ours / binary:.1f}x ({ours:.2f} vs {binary:.2f} ms) | "
                     f"{peer} |")  # fmt: skip
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=2.0, help="per cell, target and round")
    parser.add_argument("--large-seconds", type=float, default=5.0, help="the same, ResNet50")
    parser.add_argument("--models", default="small,image,resnet50")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--peers", default="pytriton,mlserver,kserve")
    parser.add_argument("--protocols", default="http", help="http, or http,grpc")
    parser.add_argument("--no-install", action="store_true", help="fail if a venv is missing")
    parser.add_argument("--before", default="", help="also graphgate from this tree (a rev)")
    parser.add_argument("--json", action="store_true", help="graphgate and PyTriton JSON rows too")
    parser.add_argument("--out", default=str(RESULTS), help="the table (a smoke run: elsewhere)")
    parser.add_argument(
        "--before-batching",
        action="store_true",
        help="the --before tree's server batches (a 'graphgate+batching (before)' target)",
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()
