"""The client's own ceiling over gRPC: a KServe V2 gRPC endpoint that does nothing (grpcio's
asyncio server, one canned answer per call), so tritonclient.grpc's and grpcio's cost is all that
is measured. ModelReady says ready; ModelInfer answers one FP32 [1, 16] output, raw.
Usage: noop_grpc_server.py PORT (runs in graphgate's environment: its generated messages)"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc
import uvloop
from grpc import aio

from server.grpc import grpc_predict_v2_pb2 as pb

INFERRED = pb.ModelInferResponse(model_name="noop", raw_output_contents=[bytes(64)])
INFERRED.outputs.add(name="y", datatype="FP32", shape=[1, 16])
ANSWERS = {
    "ModelInfer": INFERRED.SerializeToString(),
    "ModelReady": pb.ModelReadyResponse(ready=True).SerializeToString(),
}


def canned(answer: bytes) -> Any:
    async def handle(_request: bytes, _context: Any) -> bytes:
        return answer

    return grpc.unary_unary_rpc_method_handler(handle)


async def main(port: int) -> None:
    server = aio.server()
    methods = {name: canned(answer) for name, answer in ANSWERS.items()}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("inference.GRPCInferenceService", methods),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
