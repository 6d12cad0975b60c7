"""Upload to ready: ResNet50 sent to a real `graphgate serve` until its 201, against Paddle2ONNX.

Usage: python benchmarks/bench_upload.py [--rounds N]
           [--tree LABEL=SOURCE ...] [--big-mib N] [--skip-big]

1. Time to ready. ResNet50 224x224 saved by real Paddle (bench_executor.py's cached export), sent
   as one multipart body (program + params, 102 MB) over a keep-alive loopback connection to a
   `graphgate serve` of each source tree (default: /work/wt-base, the state before issue 25, and
   this tree), the clock running from the first byte sent to the 201 read. Each round's params
   differ in their last float (a fresh sha256: nothing is found stored or compiled already), and
   the version is deleted after it (its artifacts collected). Against Paddle2ONNX 2.1.0's convert
   + onnxruntime CPU session of the same files (bench_executor.py's Paddle2OnnxWorker, in its own
   venv, import excluded). Interleaved rounds, the order rotating; the ratio is taken within a
   round, the median over rounds reported. One warm-up of each first.
2. Peak memory of an upload of a program with ~1 GiB of parameters (four 8192x8192 float32
   matmul weights, built without Paddle by tests/support/builders.py), sent from a file: the
   server process and its worker processes apart, sampled from /proc every 20 ms (VmRSS) and
   read as VmHWM after the 201, each as a ratio to the params file's size. One server at a time.

Writes benchmarks/results/upload.md. The machine is shared (2 CPUs, other work running): the
figures are medians and ratios within rounds, and the load average is printed with them.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "upload.md"
BIG_CACHE = ROOT / "benchmarks" / ".cache"
BASE_TREE = Path("/work/wt-base")
BOUNDARY = "graphgate-bench-upload-boundary"
BIG_HEADROOM = 5  # MemAvailable needed, in multiples of the big upload's params
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_executor  # noqa: E402
import numpy as np  # noqa: E402
from bench_serving import serve, tenant_key  # noqa: E402

from graph_proto.types import DType  # noqa: E402
from tests.support.builders import GraphBuilder, V  # noqa: E402

_MIB = 1024**2


# -- the body ---------------------------------------------------------------------------------


def multipart_head(name: str, program: bytes) -> bytes:
    """Everything of the body before the params' bytes (the name, the program, the params'
    part head); `multipart_tail` follows the params."""
    return (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="program"; filename="m.pdmodel"'
            "\r\nContent-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + program
        + (
            f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="params"; '
            'filename="m.pdiparams"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
    )


def multipart_tail() -> bytes:
    return f"\r\n--{BOUNDARY}--\r\n".encode()


def fresh_params(params: bytes, round_no: int) -> bytes:
    """The params with their last float32 nudged: other bytes, the same model."""
    last = struct.unpack("<f", params[-4:])[0]
    return params[:-4] + struct.pack("<f", last + 1e-6 * (round_no + 1))


# -- a server and its processes ----------------------------------------------------------------


def headers_of(key: str, length: int) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {key}",
        "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        "Content-Length": str(length),
    }


def upload(url: str, key: str, body: bytes | BinaryIO, length: int) -> tuple[int, float]:
    """(status, seconds from the first byte sent to the answer read)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=900)
    conn.connect()
    start = time.perf_counter()
    conn.request("POST", "/v1/models", body=body, headers=headers_of(key, length))
    answer = conn.getresponse()
    text = answer.read()
    seconds = time.perf_counter() - start
    if answer.status != 201:
        print(f"  upload answered {answer.status}: {text[:300]!r}", flush=True)
    conn.close()
    return answer.status, seconds


def delete(url: str, key: str, name: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("DELETE", f"/v1/models/{name}", headers={"Authorization": f"Bearer {key}"})
    conn.getresponse().read()
    conn.close()


def _parents() -> dict[int, int]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            found[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def server_pid(url: str) -> int:
    """Our child process serving `url` (bench_serving.serve started it)."""
    port = url.rsplit(":", 1)[1]
    for pid, parent in _parents().items():
        if parent == os.getpid():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"--port" in cmdline and port.encode() in cmdline:
                return pid
    raise SystemExit(f"no server process found for {url}")


def workers_of(pid: int) -> list[int]:
    """The server's worker processes: its grandchildren (its children are multiprocessing's
    forkserver, which forks the workers, and resource tracker)."""
    parents = _parents()
    children = {p for p, parent in parents.items() if parent == pid}
    return [p for p, parent in parents.items() if parent in children]


def status_kib(pid: int, field_name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class RssSampler:
    """Samples VmRSS of the server and of each of its workers until stopped."""

    server: int
    interval_s: float = 0.02
    server_peak_kib: int = 0
    worker_peak_kib: int = 0
    worker_pids: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> RssSampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.server_peak_kib = max(self.server_peak_kib, status_kib(self.server, "VmRSS"))
            for pid in workers_of(self.server):
                self.worker_pids.add(pid)
                self.worker_peak_kib = max(self.worker_peak_kib, status_kib(pid, "VmRSS"))
            self._stop.wait(self.interval_s)


# -- 1. time to ready ---------------------------------------------------------------------------


@dataclass
class Tree:
    label: str
    source: Path
    url: str = ""
    key: str = ""
    times: list[float] = field(default_factory=list)


def time_to_ready(trees: list[Tree], rounds: int) -> tuple[list[float], dict[str, list[float]]]:
    (resnet,) = [m for m in bench_executor.MODELS if m.key == "resnet50"]
    program_path, params_path = bench_executor.model_files([resnet])["resnet50"]
    program, params = program_path.read_bytes(), params_path.read_bytes()
    python = bench_executor.paddle2onnx_python()
    with tempfile.TemporaryDirectory() as scratch:
        p2o = bench_executor.Paddle2OnnxWorker(
            python, program_path, params_path, Path(scratch) / "p2o.onnx"
        )
        if "error" in p2o.hello:
            raise SystemExit(f"Paddle2ONNX did not start: {p2o.hello['error']}")
        p2o_times: list[float] = []
        try:
            for round_no in range(-1, rounds):  # -1: the warm-up
                body = multipart_head("resnet50", program)
                body += fresh_params(params, round_no) + multipart_tail()
                steps = [*trees, None]
                turn = max(round_no, 0) % len(steps)
                for tree in steps[turn:] + steps[:turn]:
                    if tree is None:
                        answer = p2o.run()
                        if "error" in answer:
                            raise SystemExit(f"Paddle2ONNX failed: {answer['error']}")
                        if round_no >= 0:
                            p2o_times.append(answer["total_s"])
                        continue
                    status, seconds = upload(tree.url, tree.key, body, len(body))
                    if status != 201:
                        raise SystemExit(f"{tree.label}: the upload answered {status}")
                    delete(tree.url, tree.key, "resnet50")
                    if round_no >= 0:
                        tree.times.append(seconds)
                print(
                    f"round {round_no}: "
                    + ", ".join(f"{t.label} {t.times[-1]:.2f} s" for t in trees if t.times)
                    + (f", Paddle2ONNX {p2o_times[-1]:.2f} s" if p2o_times else ""),
                    flush=True,
                )
        finally:
            p2o.close()
    return p2o_times, {t.label: t.times for t in trees}


# -- 2. peak memory of a ~1 GiB upload -----------------------------------------------------------


def big_program(mib: int) -> tuple[Path, Path]:
    """A matmul chain whose weights are `mib` MiB together (cached in benchmarks/.cache)."""
    program_path = BIG_CACHE / f"big_matmul_{mib}mib.pdmodel"
    params_path = BIG_CACHE / f"big_matmul_{mib}mib.pdiparams"
    if program_path.exists() and params_path.exists():
        return program_path, params_path
    side = 8192
    layers = max(1, mib * _MIB // (side * side * 4))
    g = GraphBuilder()
    h = g.feed("x", DType.FP32, [-1, side])
    for i in range(layers):
        w = g.param(f"w{i}", np.full((side, side), 1.0 / side, dtype=np.float32))
        out = V(f"h{i}", [-1, side])
        g.node(
            "matmul_v2", {"X": [h], "Y": [w]}, {"Out": [out]}, {"trans_x": False, "trans_y": False}
        )
        h = out.name
    g.fetch(h)
    built = g.built()
    assert built.params is not None
    BIG_CACHE.mkdir(parents=True, exist_ok=True)
    params_path.write_bytes(built.params)
    program_path.write_bytes(built.program)  # last: marks it complete
    return program_path, params_path


@dataclass(frozen=True)
class Memory:
    label: str
    status: int
    seconds: float
    params_bytes: int
    server_before_kib: int
    server_peak_kib: int
    server_hwm_kib: int
    worker_peak_kib: int
    worker_hwm_kib: int


def peak_memory(tree: Tree, mib: int) -> Memory:
    program_path, params_path = big_program(mib)
    params_size = params_path.stat().st_size
    head = multipart_head("big", program_path.read_bytes())
    with tempfile.TemporaryDirectory() as scratch, _server(tree, scratch) as url:
        key = tenant_key(url)
        body_path = Path(scratch) / "body"
        with body_path.open("wb") as body, params_path.open("rb") as params:
            body.write(head)
            while chunk := params.read(16 * _MIB):
                body.write(chunk)
            body.write(multipart_tail())
        pid = server_pid(url)
        time.sleep(2)  # the workers started
        before = status_kib(pid, "VmRSS")
        with RssSampler(pid) as sampler, body_path.open("rb") as body:
            status, seconds = upload(url, key, body, body_path.stat().st_size)
        worker_hwm = max((status_kib(w, "VmHWM") for w in sampler.worker_pids), default=0)
        return Memory(
            tree.label, status, seconds, params_size, before, sampler.server_peak_kib,
            status_kib(pid, "VmHWM"), sampler.worker_peak_kib, worker_hwm,
        )  # fmt: skip


@contextmanager
def _server(tree: Tree, scratch: str) -> Iterator[str]:
    """bench_serving.serve's server; when it does not come up (60 s), once more with its
    output kept, to say why."""
    data = Path(scratch) / f"data-{tree.label}"
    try:
        context = serve(data, tree.source)
        url = context.__enter__()
    except Exception as error:  # httpx2's ConnectError after serve's 60 s
        raise SystemExit(
            f"{tree.label}: the server did not come up: {error}; {_why(tree)}"
        ) from None
    try:
        yield url
    finally:
        context.__exit__(None, None, None)


def _why(tree: Tree) -> str:
    """The last lines a server of `tree` prints when started by hand (30 s at most)."""
    import subprocess

    with tempfile.TemporaryDirectory() as data:
        command = [sys.executable, "-m", "server.cli", "serve", "--port", "0", "--data-dir", data]
        env = {**os.environ, "GRAPHGATE_ADMIN_TOKEN": "x" * 40, "PYTHONPATH": str(tree.source)}
        try:
            done = subprocess.run(
                command, cwd=tree.source, env=env, capture_output=True, text=True, timeout=30
            )
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired as slow:
            output = f"still running after 30 s (it started): {slow.stderr!r}"
    return " | ".join(output.strip().splitlines()[-5:])


# -- the report ---------------------------------------------------------------------------------


def ratio_rows(p2o: list[float], times: dict[str, list[float]]) -> list[str]:
    rows = [
        "| what | median s | [min-max] | median ratio to Paddle2ONNX within a round |",
        "|---|---|---|---|",
    ]
    p2o_median = statistics.median(p2o)
    rows.append(f"| Paddle2ONNX 2.1.0 convert + ORT session | {p2o_median:.2f} | "
                 f"[{min(p2o):.2f}-{max(p2o):.2f}] | 1.00 |")  # fmt: skip
    for label, seconds in times.items():
        ratios = [s / p for s, p in zip(seconds, p2o, strict=True)]
        rows.append(
            f"| graphgate upload to 201, {label} | {statistics.median(seconds):.2f} | "
            f"[{min(seconds):.2f}-{max(seconds):.2f}] | {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}] |"
        )
    return rows


def memory_rows(found: list[Memory]) -> list[str]:
    rows = [
        "| tree | status | s | params MiB | server before MiB | server peak MiB (x params) "
        "| server growth MiB (x params) | server VmHWM MiB (x params) "
        "| worker peak MiB (x params) | worker VmHWM MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in found:
        size_kib = m.params_bytes / 1024

        growth = m.server_peak_kib - m.server_before_kib

        def mib(kib: int) -> str:
            return f"{kib / 1024:,.0f}"

        rows.append(
            f"| {m.label} | {m.status} | {m.seconds:.1f} | {m.params_bytes / _MIB:,.0f} | "
            f"{mib(m.server_before_kib)} | {mib(m.server_peak_kib)} "
            f"({m.server_peak_kib / size_kib:.2f}x) | {mib(growth)} ({growth / size_kib:.2f}x) "
            f"| {mib(m.server_hwm_kib)} "
            f"({m.server_hwm_kib / size_kib:.2f}x) | {mib(m.worker_peak_kib)} "
            f"({m.worker_peak_kib / size_kib:.2f}x) | {mib(m.worker_hwm_kib)} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--tree", action="append", default=[], help="LABEL=SOURCE (default: before and this tree)"
    )
    parser.add_argument("--big-mib", type=int, default=1024)
    parser.add_argument(
        "--big",
        action="append",
        default=[],
        help="LABEL:MIB, a tree's peak-memory upload at that size (default: every tree at "
        "--big-mib)",
    )
    parser.add_argument("--skip-big", action="store_true")
    parser.add_argument("--skip-time", action="store_true")
    parser.add_argument(
        "--compile-nice",
        type=int,
        help="GRAPHGATE_COMPILE_NICE for every server (default: the server's own, 10: a "
        "compile yields the CPUs to inference, and so to any other work on a loaded machine)",
    )
    args = parser.parse_args()
    if args.compile_nice is not None:
        os.environ["GRAPHGATE_COMPILE_NICE"] = str(args.compile_nice)
    specs = args.tree or [f"before={BASE_TREE}", f"after={ROOT}"]
    trees = [Tree(label, Path(source)) for label, source in (s.split("=", 1) for s in specs)]
    os.environ["GRAPHGATE_MAX_UPLOAD_BYTES"] = str(4 * 1024**3)
    load = os.getloadavg()
    lines = [
        "# Upload to ready (issue 25, point 3)",
        "",
        "Command: `" + " ".join(["python benchmarks/bench_upload.py", *sys.argv[1:]]) + "`",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, shared "
        f"with other work (load average at start {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}). "
        + "Trees: "
        + ", ".join(f"{t.label} = `{t.source}`" for t in trees)
        + ".",
        "",
    ]
    if not args.skip_time:
        with tempfile.TemporaryDirectory() as scratch, _servers(trees, scratch):
            p2o, times = time_to_ready(trees, args.rounds)
        lines += [
            f"## ResNet50: multipart upload to 201 against Paddle2ONNX ({args.rounds} interleaved "
            "rounds after a warm-up)",
            "",
            *ratio_rows(p2o, times),
            "",
        ]
    bigs = args.big or [f"{t.label}:{args.big_mib}" for t in trees]
    if not args.skip_big:
        found, refused = [], []
        for label, mib in (b.rsplit(":", 1) for b in bigs):
            if refusal := _memory_refusal(int(mib)):
                print(f"{label}: {refusal}", flush=True)
                refused.append(f"{label}, {mib} MiB: {refusal}")
                continue
            (tree,) = [t for t in trees if t.label == label]
            found.append(peak_memory(tree, int(mib)))
            print(found[-1], flush=True)
        lines += [
            "## Peak memory of an upload of a large program (one server at a time)",
            "",
            *memory_rows(found),
            "",
            *(f"Not run: {line}" for line in refused),
            "",
            "Server: the `graphgate serve` process; worker: the largest of its worker "
            "processes (the compile runs there). Peak: VmRSS sampled every 20 ms during the "
            "upload; VmHWM: the process's own high-water mark read after the 201.",
            "",
        ]
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def _memory_refusal(mib: int) -> str:
    """Why the big upload would not fit in this shared machine's free memory now ("" if it
    fits): a compile holds the weights a few times over in its worker (the lowering's protobuf,
    its serialization, onnxruntime's copy) and the other engineers' work must not be killed
    for it."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            available_mib = int(line.split()[1]) // 1024
            if available_mib < BIG_HEADROOM * mib:
                return (
                    f"MemAvailable {available_mib:,} MiB < {BIG_HEADROOM} x {mib:,} MiB: not run "
                    "(use a smaller --big-mib or a quieter machine)"
                )
    return ""


@contextmanager
def _servers(trees: list[Tree], scratch: str) -> Iterator[None]:
    """A server per tree, each with a tenant; stopped on the way out."""
    if not trees:
        yield
        return
    first, rest = trees[0], trees[1:]
    with _server(first, scratch) as url:
        first.url, first.key = url, tenant_key(url)
        with _servers(rest, scratch):
            yield


if __name__ == "__main__":
    raise SystemExit(main())
