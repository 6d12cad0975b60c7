"""`graphgate serve` with the batcher's TEST-ONLY override (server/batching.py `Batchers`,
`batchable=`): every model with a batch axis on every input batches. BENCHMARKS ONLY: the
validator's batch-independence proof (issue 13 item 1) is not merged on this branch, and the
models benchmarked (an fc layer, CNNs in eval mode) are row-independent by construction.
Usage: python graphgate_assume_batchable.py <graphgate serve arguments>"""

from __future__ import annotations

import functools
import sys

import server.main
from server.batching import Batchers
from server.cli import app

server.main.Batchers = functools.partial(Batchers, batchable=lambda report: True)  # type: ignore[misc]

if __name__ == "__main__":
    sys.argv[0] = "graphgate"
    app()
