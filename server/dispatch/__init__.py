"""Dispatch: where a request's work runs. Crash-isolated workers run every compile and every
inference in a supervised child process (pool.py), tensors cross by a shared-memory arena per
worker (arena.py), a worker that dies fails only its own request; dynamic batching (batching.py)
merges concurrent requests to one model into one run. See docs/architecture.md."""

from server.dispatch.pool import (
    Blob,
    Cancel,
    Digests,
    ModelLabel,
    PoolSettings,
    RemoteModel,
    WorkerPool,
    WorkerStats,
    sha256_of,
    size_of,
)

__all__ = [
    "Blob",
    "Cancel",
    "Digests",
    "ModelLabel",
    "PoolSettings",
    "RemoteModel",
    "WorkerPool",
    "WorkerStats",
    "sha256_of",
    "size_of",
]
