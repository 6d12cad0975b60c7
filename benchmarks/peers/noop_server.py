"""The client's own ceiling: a V2 endpoint that does nothing (raw asyncio, one canned answer
per request, keep-alive), so the client's cost is all that is measured. A request with binary
tensors (Inference-Header-Content-Length) gets a binary answer, others JSON, as a server would.
Usage: noop_server.py PORT (runs in graphgate's environment; no dependency)"""

from __future__ import annotations

import asyncio
import json
import sys

BODY = json.dumps(
    {
        "model_name": "noop",
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}],
    }
).encode()
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)
BINARY_HEAD = json.dumps(
    {
        "model_name": "noop",
        "outputs": [
            {
                "name": "y",
                "datatype": "FP32",
                "shape": [1, 16],
                "parameters": {"binary_data_size": 64},
            }
        ],
    }
).encode()
BINARY_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
    + b"inference-header-content-length: "
    + str(len(BINARY_HEAD)).encode()
    + b"\r\ncontent-length: "
    + str(len(BINARY_HEAD) + 64).encode()
    + b"\r\n\r\n"
    + BINARY_HEAD
    + bytes(64)
)
READY = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            binary = False
            for line in head.split(b"\r\n"):
                lower = line.lower()
                if lower.startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                binary = binary or lower.startswith(b"inference-header-content-length:")
            if length:
                await reader.readexactly(length)
            if not head.startswith(b"POST"):
                writer.write(READY)
            else:
                writer.write(BINARY_ANSWER if binary else ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
