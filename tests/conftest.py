"""Settings every test process starts from."""

from __future__ import annotations

import os

# Tests run side by side (and beside other checkouts' tests): an app or a `graphgate serve` they
# start must not bind the gRPC endpoint's default port, 8001. A test that speaks gRPC gives its
# server a free port of its own (GRAPHGATE_GRPC_PORT in the server's environment).
os.environ["GRAPHGATE_GRPC_PORT"] = "0"
