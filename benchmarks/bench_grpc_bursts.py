"""Does a burst of calls reach graphgate's batcher together, over gRPC and over REST?

One `graphgate serve` with its dynamic batcher (max batch 32, 200 us, as bench_peers.py), the
small model, and a client that sends `--burst` calls at once (one asyncio loop: grpc.aio on one
channel for gRPC, httpx2 for REST binary requests), waits for all of them, and sends the next
burst. Printed per protocol: calls/s, the server's CPU per call (its process and workers, from
/proc) and the rows per worker run the batcher achieved (its /metrics). A batcher that sees a
burst whole runs it in one or two runs (rows per run near `--burst`); one that sees the calls
one by one runs each alone (near 1).

    python benchmarks/bench_grpc_bursts.py --burst 8 --bursts 200
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path

import httpx2
import numpy as np
import orjson
from grpc import aio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_peers  # noqa: E402
from bench_loop_cost import cpu_seconds, serve_pid  # noqa: E402

from server.grpc import grpc_predict_v2_pb2 as pb  # noqa: E402

Sender = Callable[[int, int], Awaitable[None]]  # (burst, bursts)


def grpc_sender(address: str, key: str, model: str, feed: str, x: np.ndarray) -> Sender:
    request = pb.ModelInferRequest(model_name=model, raw_input_contents=[x.tobytes()])
    request.inputs.add(name=feed, datatype="FP32", shape=list(x.shape))
    metadata = (("authorization", f"Bearer {key}"),)

    async def send(burst: int, bursts: int) -> None:
        async with aio.insecure_channel(address) as channel:
            infer = channel.unary_unary(
                "/inference.GRPCInferenceService/ModelInfer",
                request_serializer=pb.ModelInferRequest.SerializeToString,
                response_deserializer=pb.ModelInferResponse.FromString,
            )
            for _ in range(bursts):
                await asyncio.gather(*(infer(request, metadata=metadata) for _ in range(burst)))

    return send


def http_sender(url: str, key: str, model: str, feed: str, x: np.ndarray) -> Sender:
    tensor = {"name": feed, "datatype": "FP32", "shape": list(x.shape)}
    tensor["parameters"] = {"binary_data_size": x.nbytes}
    head = orjson.dumps({"inputs": [tensor]})
    headers = {"Authorization": f"Bearer {key}", "Inference-Header-Content-Length": str(len(head))}
    body = head + x.tobytes()

    async def send(burst: int, bursts: int) -> None:
        limits = httpx2.Limits(max_connections=burst)
        async with httpx2.AsyncClient(base_url=f"http://{url}", limits=limits) as client:
            for _ in range(bursts):
                calls = [
                    client.post(f"/v2/models/{model}/infer", content=body, headers=headers)
                    for _ in range(burst)
                ]
                for answer in await asyncio.gather(*calls):
                    answer.raise_for_status()

    return send


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=8, help="calls sent at once")
    parser.add_argument("--bursts", type=int, default=200, help="per protocol")
    args = parser.parse_args()
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url, grpc_address, key = bench_peers.graphgate(stack, True, Path(tmp) / "data")
        pid = serve_pid(url)
        (case,) = bench_peers.cases(1.0, 1.0, ["small"])
        feed = bench_peers.signature(bench_peers.upload(url, key, case))["inputs"][0]["name"]
        senders = {
            "gRPC": grpc_sender(grpc_address, key, case.key, feed, case.x),
            "REST": http_sender(url, key, case.key, feed, case.x),
        }
        server = bench_peers.Target("graphgate", url)
        for protocol, send in senders.items():
            asyncio.run(send(args.burst, 5))  # warm-up: connections, sessions, the batcher
            rows, runs = bench_peers.batch_rows(server)
            used, start = cpu_seconds(pid), time.perf_counter()
            asyncio.run(send(args.burst, args.bursts))
            wall, used = time.perf_counter() - start, cpu_seconds(pid) - used
            rows_after, runs_after = bench_peers.batch_rows(server)
            calls = args.burst * args.bursts
            print(
                f"{protocol}: bursts of {args.burst}, {calls / wall:.0f} calls/s, server CPU "
                f"{1e6 * used / calls:.0f} us/call, "
                f"{(rows_after - rows) / max(1.0, runs_after - runs):.2f} rows per worker run",
                flush=True,
            )


if __name__ == "__main__":
    main()
