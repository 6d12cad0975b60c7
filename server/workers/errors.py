"""What the worker pool answers when a worker cannot: each a 503 but a compile timeout."""

from __future__ import annotations

from server.services.types import ServiceError


class WorkerUnavailable(ServiceError):
    """The family of worker failures below: the request did not complete, the server is fine."""

    code = "WORKER_UNAVAILABLE"


class WorkerCrashed(WorkerUnavailable):
    """The worker process running the request died (a native crash, a kill); it was replaced
    and the request may be retried."""

    code = "WORKER_CRASHED"


class WorkerOutOfMemory(WorkerUnavailable):
    """The request took its worker over the per-worker memory cap
    (`GRAPHGATE_WORKER_MEMORY_MB`); the worker was replaced."""

    code = "WORKER_OUT_OF_MEMORY"


class ModelQuarantined(WorkerUnavailable):
    """This model version crashed workers repeatedly and is not run until an admin releases it."""

    code = "MODEL_QUARANTINED"


class CompileTimeout(ServiceError):
    """Validating and compiling the upload took longer than `GRAPHGATE_COMPILE_TIMEOUT_S`."""

    code = "COMPILE_TIMEOUT"
