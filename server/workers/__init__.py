"""Crash-isolated workers: every compile and every inference runs in a supervised child process
(pool.py), tensors cross by a shared-memory arena per worker (arena.py), and a worker that dies
fails only its own request (issue 10, DESIGN.md "Isolation")."""

from server.workers.errors import (
    CompileTimeout,
    ModelQuarantined,
    WorkerCrashed,
    WorkerOutOfMemory,
    WorkerUnavailable,
)
from server.workers.pool import Cancel, PoolSettings, RemoteModel, WorkerPool, WorkerStats

__all__ = [
    "Cancel",
    "CompileTimeout",
    "ModelQuarantined",
    "PoolSettings",
    "RemoteModel",
    "WorkerCrashed",
    "WorkerOutOfMemory",
    "WorkerPool",
    "WorkerStats",
    "WorkerUnavailable",
]
