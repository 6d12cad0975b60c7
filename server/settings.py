"""Service settings, from arguments or GRAPHGATE_* environment variables.

Every field's description is its README row (server/cli/doc_tables.py generates the settings table),
so a new setting is documented by declaring it. The validator's Policy and onnxruntime's
SessionOptions are built from here (`policy()`, `session_options()`); their defaults are the
Policy's and SessionOptions' own, read from them rather than copied.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from executor import SessionOptions
from validator import DEFAULT_POLICY, Policy
from validator.policy import LOOP_TRIPS_CEILING

# An artifacts URL (`s3://bucket/prefix`); server/storage/s3.py reads its groups.
S3_URL: Final = re.compile(
    r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>.*))?$"
)
_SESSION: Final = SessionOptions()
# The Policy fields: the one list. Each is a setting here under its own name
# (GRAPHGATE_MAX_BATCH, ...), its bounds declared on it (`bounds_of`), and each may be set per
# tenant by an operator (server/services/policies.py, the console's policy form).
POLICY_FIELDS: Final = (
    "max_program_bytes",
    "max_params_bytes",
    "max_ops",
    "max_blocks",
    "max_nesting",
    "max_vars",
    "max_feeds",
    "max_fetches",
    "max_tensor_bytes",
    "max_batch",
    "max_dynamic_dim",
    "max_activation_bytes_per_sample",
    "max_flops_per_sample",
    "max_loop_trips",
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GRAPHGATE_", extra="ignore", env_parse_none_str="null"
    )

    # -- the server ---------------------------------------------------------------------------
    host: str = Field(default="127.0.0.1", description="the address `graphgate serve` listens on")
    port: int = Field(default=8000, ge=1, le=65535, description="the port it listens on")
    grpc_port: int = Field(
        default=8001,  # Triton's
        ge=0,
        le=65535,
        description="the port of the KServe V2 gRPC endpoint (`inference.GRPCInferenceService` "
        "and `grpc.health.v1.Health`, on `host`, served by the same process); `0`: off",
    )
    data_dir: Path = Field(
        default=Path("graphgate-data"),
        description="the SQLite database and the artifacts folder",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="the admin key (at least 32 characters); unset, the first start makes one "
        "and prints it once",
    )
    access_log: bool = Field(
        default=False,
        # As in Triton: /metrics counts every request, and a line each costs ~0.15 ms.
        description="uvicorn's line per request (`/metrics` counts every request anyway)",
    )
    # -- scale-out backends (README "Scale-out"); unset, everything lives in `data_dir` --------
    database_url: SecretStr | None = Field(
        default=None,
        description="metadata in PostgreSQL (`postgresql+psycopg://USER:PASSWORD@HOST/DB`) "
        "instead of SQLite in `data_dir`; migrated at start under an advisory lock",
    )
    db_pool_size: int = Field(
        default=10, ge=1, description="PostgreSQL connections each process keeps open"
    )
    db_max_overflow: int = Field(
        default=10, ge=0, description="PostgreSQL connections opened past the pool under load"
    )
    db_pool_timeout_s: float = Field(
        default=10.0, gt=0, description="seconds a request waits for a PostgreSQL connection"
    )
    artifacts_url: str | None = Field(
        default=None,
        pattern=S3_URL.pattern,
        description="artifacts in S3-compatible storage (`s3://bucket/prefix`; endpoint and "
        "credentials from the standard `AWS_*` variables) instead of `data_dir`",
    )
    redis_url: SecretStr | None = Field(
        default=None,
        description="`redis://HOST:6379/0`: tenant limits shared by every replica and cache "
        "invalidation published to all of them at once; unset, both are per process",
    )
    # -- bodies and caches --------------------------------------------------------------------
    max_upload_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1, description="bytes of a `/v1/models` or `/v1/check` body"
    )
    max_infer_bytes: int = Field(
        default=64 * 1024 * 1024,  # Triton's --http-max-input-size default
        ge=1,
        description="bytes of a `/v2` inference body, and of it once decompressed; of a gRPC "
        "message too (more is `PAYLOAD_TOO_LARGE`)",
    )
    max_request_bytes: int = Field(
        default=_SESSION.max_request_bytes,
        ge=1,
        description="bytes of the decoded feeds of one inference request together "
        "(`INPUT_TOO_LARGE`)",
    )
    max_response_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=0,
        description="bytes of one inference's answer (the default of a tenant's quota "
        "`max_response_bytes`), refused before the run from its output shapes or as it is "
        "encoded: 413 `RESPONSE_OVER_BUDGET`; `0`: off",
    )
    max_json_response_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="bytes of one inference's answer as JSON text (~4-20 bytes a number; "
        "binary outputs are not counted; the default of a tenant's quota "
        "`max_json_response_bytes`): 413 `RESPONSE_OVER_BUDGET`; `0`: off",
    )
    model_cache_size: int = Field(
        default=64,
        ge=1,
        description="compiled model versions kept in memory (least recently used dropped first)",
    )
    auth_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="seconds an authenticated key stays cached; this process's own key and "
        "tenant writes drop it at once, other replicas' within the TTL; `0`: off",
    )
    model_lookup_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="seconds a model-name lookup stays cached; this process's uploads and "
        "deletes drop it at once, other replicas' within the TTL; `0`: off",
    )
    # -- per tenant (README "Limits and metrics"); 0 turns either off --------------------------
    tenant_rate_per_s: float = Field(
        default=200.0,
        ge=0,
        description="requests a second made with a tenant's keys, on every authenticated `/v1` "
        "and `/v2` route (a token bucket per tenant); `0`: off",
    )
    tenant_rate_burst: int = Field(
        default=400, ge=1, description="requests a tenant may save up and send at once"
    )
    tenant_max_concurrent: int = Field(
        default=32,
        ge=0,
        description="`/v2` inference requests of one tenant in flight at once, from auth until "
        "the answer is computed (body read, decoded and run); `0`: off",
    )
    # -- HTTP connections, queues, shutdown and storage (README "Hardening") -------------------
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="bytes of a request head (request line and headers); more is 431 "
        "`HEADER_TOO_LARGE`; of a gRPC call's metadata too (RESOURCE_EXHAUSTED)",
    )
    max_headers: int = Field(
        default=100,
        ge=1,
        description="headers in one request; more is 431 `TOO_MANY_HEADERS`; entries of a gRPC "
        "call's metadata too (RESOURCE_EXHAUSTED)",
    )
    max_request_line_bytes: int = Field(
        default=8 * 1024,
        ge=256,
        description="bytes of a request's URL; more is 414 `REQUEST_LINE_TOO_LONG`",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="seconds a client has to send a whole request head (408 `HEADER_TIMEOUT`)",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="seconds without a body byte before an unfinished body is answered 408 "
        "`BODY_TIMEOUT` and its connection closed",
    )
    keep_alive_timeout_s: int = Field(
        default=5,
        ge=1,
        description="seconds an idle connection (before its first request or between two) is "
        "kept open",
    )
    grpc_max_streams: int = Field(
        default=100,
        ge=1,
        description="gRPC calls in flight on one connection (HTTP/2 streams); more are refused "
        "(REFUSED_STREAM: the client sees UNAVAILABLE)",
    )
    grpc_tls_cert: Path | None = Field(
        default=None,
        description="the gRPC endpoint's TLS certificate chain (PEM); with `grpc_tls_key`, the "
        "port speaks TLS only; unset, plaintext (TLS then ends at a proxy)",
    )
    grpc_tls_key: Path | None = Field(
        default=None, description="the private key (PEM) of `grpc_tls_cert`"
    )
    grpc_tls_client_ca: Path | None = Field(
        default=None,
        description="CA certificates (PEM): with TLS on, every gRPC client must present a "
        "certificate they signed (mutual TLS), besides its tenant key",
    )
    shutdown_grace_s: int = Field(
        default=30,
        ge=0,
        description="on SIGTERM: seconds in-flight requests get to finish after the server "
        "stops accepting, before it exits anyway",
    )
    compile_threads: int = Field(
        default=2,
        ge=1,
        description="threads that validate and compile uploads and checks (their own pool: "
        "compile work never takes the threads other routes use)",
    )
    max_queued_compiles: int = Field(
        default=32,
        ge=1,
        description="uploads and checks of all tenants compiling or waiting at once; more is 503 "
        "`OVERLOADED`",
    )
    max_queued_inferences: int = Field(
        default=256,
        ge=1,
        description="`/v2` inference requests of all tenants in flight at once; more is 503 "
        "`OVERLOADED`",
    )
    artifact_gc_grace_s: int = Field(
        default=3600,
        ge=0,
        description="the start-up sweep deletes artifacts no model version names only when they "
        "were last stored longer ago than this (younger ones may be another replica's upload "
        "in flight)",
    )
    tenant_max_concurrent_uploads: int = Field(
        default=4,
        ge=0,
        description="uploads and checks of one tenant compiling or waiting at once (the "
        "default of its quota `max_concurrent_uploads`); more is 429 `TOO_MANY_COMPILES`; `0`: off",
    )
    tenant_max_storage_bytes: int = Field(
        default=0,
        ge=0,
        description="bytes of a tenant's stored programs, parameters and ONNX files (the "
        "default of its quota `max_storage_bytes`); an upload past it is 413 `STORAGE_QUOTA`; "
        "`0`: off",
    )
    tenant_max_models: int = Field(
        default=0, ge=0, description="models a tenant may have (`QUOTA_EXCEEDED`); `0`: off"
    )
    tenant_max_versions: int = Field(
        default=0,
        ge=0,
        description="stored versions of all a tenant's models together (`QUOTA_EXCEEDED`); "
        "`0`: off",
    )
    rejections_kept: int = Field(
        default=20,
        ge=0,
        description="rejected uploads kept per tenant with their diagnostics (the newest)",
    )
    # -- the validator's Policy (every upload, and every stored model when it is loaded) -------
    max_program_bytes: int = Field(
        default=DEFAULT_POLICY.max_program_bytes, ge=1, description="policy: bytes of a `.pdmodel`"
    )
    max_params_bytes: int = Field(
        default=DEFAULT_POLICY.max_params_bytes,
        ge=0,
        description="policy: bytes of the parameters together",
    )
    max_ops: int = Field(
        default=DEFAULT_POLICY.max_ops, ge=1, description="policy: ops in a program"
    )
    max_blocks: int = Field(
        default=DEFAULT_POLICY.max_blocks, ge=1, description="policy: blocks in a program"
    )
    max_nesting: int = Field(
        default=DEFAULT_POLICY.max_nesting, ge=0, description="policy: how deep sub-blocks nest"
    )
    max_vars: int = Field(
        default=DEFAULT_POLICY.max_vars, ge=1, description="policy: variables in a program"
    )
    max_feeds: int = Field(
        default=DEFAULT_POLICY.max_feeds, ge=1, description="policy: program inputs"
    )
    max_fetches: int = Field(
        default=DEFAULT_POLICY.max_fetches, ge=1, description="policy: program outputs"
    )
    max_tensor_bytes: int = Field(
        default=DEFAULT_POLICY.max_tensor_bytes,
        ge=1,
        description="policy: bytes of any one tensor at the max batch (and, at run time, of "
        "one sized by input data)",
    )
    max_batch: int = Field(
        default=DEFAULT_POLICY.max_batch,
        ge=1,
        description="policy: the batch size every budget is evaluated at",
    )
    max_dynamic_dim: int = Field(
        default=DEFAULT_POLICY.max_dynamic_dim,
        ge=1,
        description="policy: what any other unknown dim of an input is evaluated at",
    )
    max_activation_bytes_per_sample: int = Field(
        default=DEFAULT_POLICY.max_activation_bytes_per_sample,
        ge=1,
        description="policy: peak live activation bytes per sample",
    )
    max_flops_per_sample: int = Field(
        default=DEFAULT_POLICY.max_flops_per_sample, ge=1, description="policy: FLOPs per sample"
    )
    max_loop_trips: int | None = Field(
        default=DEFAULT_POLICY.max_loop_trips,
        ge=0,
        le=LOOP_TRIPS_CEILING,
        description=f"policy: iterations of any while loop, enforced at run time (0 to "
        f"{LOOP_TRIPS_CEILING}); `null`: no loops at all",
    )
    # -- onnxruntime sessions ------------------------------------------------------------------
    ort_intra_op_threads: int = Field(
        default=_SESSION.intra_op_threads,
        ge=0,
        description="onnxruntime threads within one op; `0`: its default (one per core)",
    )
    ort_inter_op_threads: int = Field(
        default=_SESSION.inter_op_threads,
        ge=0,
        description="onnxruntime threads running independent ops at once",
    )
    ort_allow_spinning: bool = Field(
        # Unbounded (onnxruntime's own spin), an idle worker's spinning threads slowed the busy
        # one: ResNet50 served at half its raw speed. Bounded to ort_spin_us, with the worker's
        # calling thread pinned beside onnxruntime's, spinning gained 2-6 points of ResNet50's
        # throughput at 1, 2 and 4 callers (benchmarks/results/workers.md).
        default=True,
        description="let onnxruntime's idle threads spin a while waiting for more work, "
        "`GRAPHGATE_ORT_SPIN_US` at most",
    )
    ort_spin_us: int = Field(
        default=20,
        ge=0,
        le=1_000_000,
        description="microseconds an idle onnxruntime thread spins before it sleeps, with "
        "`GRAPHGATE_ORT_ALLOW_SPINNING` (`0`: onnxruntime's own default, unbounded enough to take "
        "a busy worker's CPU)",
    )
    use_cuda: bool = Field(
        default=_SESSION.use_cuda,
        description="run on CUDA where it can start: the NVIDIA driver, a GPU and the CUDA "
        "libraries (CPU otherwise; `graphgate doctor` says why)",
    )

    # -- the operator's console (/admin) ------------------------------------------------------
    cookie_secure: bool = Field(
        default=False,
        description="mark the console's session and login-form cookies `Secure` (set it when served over HTTPS)",
    )
    console_idle_s: float = Field(
        default=1800.0, gt=0, description="seconds a console session lives without a request"
    )
    console_max_s: float = Field(
        default=43200.0, gt=0, description="seconds a console session lives after its login"
    )
    console_login_attempts: int = Field(
        default=10,
        ge=0,
        description="failed console logins a minute from one client address, and against "
        "one key id, before `LOGIN_RATE_LIMITED`; `0`: off",
    )
    trusted_proxies: str = Field(
        default="",
        max_length=2000,
        pattern=r"^[0-9A-Fa-f:.,/ ]*$",
        description="addresses or networks (comma separated, e.g. `172.30.0.10` or "
        "`10.0.0.0/8`) of the reverse proxies whose `X-Forwarded-For` and `X-Forwarded-Proto` "
        "are believed (the client address of the audit log and the login limit); empty: none, "
        "every peer is the client",
    )

    # -- dynamic batching and the CUDA provider (README "Batching", "GPU") ------------------
    batch_max_size: int = Field(
        default=32,
        ge=0,
        description="rows one batch of a model the validator proves batchable may hold "
        "(requests with equal non-batch dims are concatenated, run once, split back); "
        "`0` or `1`: no batching",
    )
    batch_max_queue_delay_us: int = Field(
        # 0: no wait at low load (one request, no worker busy, runs at once); under load the
        # requests that queue while every worker is busy still go out together.
        default=0,
        ge=0,
        le=1_000_000,
        description="microseconds the oldest request of a batch waits for others while a "
        "worker is free (requests that queued while every worker was busy batch anyway)",
    )
    batch_preferred_sizes: tuple[int, ...] = Field(
        default=(),
        description="batch sizes (rows) a batch closes at without waiting further; empty: "
        "`batch_max_size`",
    )
    batch_max_run_ms: float = Field(
        # A few rows of a large model (ResNet50 at 32 clients on 2 CPUs: ~2 rows a run, 0.9-1.1x
        # the req/s of the uncapped batcher at 0.6-0.7x its p99, under the unbatched p99;
        # benchmarks/results/batching.md, 2026-12-04). At 10 ms ResNet50 ran a row at a time,
        # 0.91x that req/s. A cheap model's batch of 32 (the image classifier's: ~3 ms) is far
        # below either.
        default=300.0,
        gt=0,
        le=60_000,
        description="milliseconds a batch's rows are expected to add to its run at most "
        "(rows x the seconds each row adds, measured per model); also at most half the time "
        "the most pressed queued request has left; a request always runs, alone if need be",
    )
    cuda_mem_limit_mb: int = Field(
        default=0,
        ge=0,
        description="GPU memory each worker's CUDA arena may take, in MiB (`0`: no limit)",
    )
    cuda_arena_extend_strategy: Literal["kNextPowerOfTwo", "kSameAsRequested"] = Field(
        default="kSameAsRequested",
        description="how the CUDA arena grows: by what a run asks for, or to the next power of two",
    )
    cuda_graphs: bool = Field(
        default=False,
        description="capture a CUDA graph per fixed-shape model (every input dim static): "
        "fewer kernel launches, the first run slower",
    )

    @model_validator(mode="after")
    def _grpc_tls_complete(self) -> Settings:
        if (self.grpc_tls_cert is None) != (self.grpc_tls_key is None):
            raise ValueError("grpc_tls_cert and grpc_tls_key: expected both or neither, got one")
        if self.grpc_tls_client_ca is not None and self.grpc_tls_cert is None:
            raise ValueError("grpc_tls_client_ca: expected with grpc_tls_cert and grpc_tls_key")
        return self

    @field_validator("admin_token")
    @classmethod
    def _strong_admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError("admin_token must be at least 32 characters")
        return value

    # -- worker processes, deadlines (README "Isolation") -----------------------------------
    workers: int = Field(
        default=2,
        ge=1,
        le=256,
        description="worker processes compiling and running models (the server process "
        "runs none); a worker that dies is replaced",
    )
    worker_memory_mb: int = Field(
        default=8192,
        ge=0,
        description="address-space cap of each worker (RLIMIT_AS); a request that takes a "
        "worker over it fails with 503 `WORKER_OUT_OF_MEMORY` and the worker is replaced; "
        "`0`: no cap",
    )
    worker_session_cache_mb: int = Field(
        default=2048,
        ge=1,
        description="compiled sessions each worker keeps, in MiB (weights or measured RSS "
        "growth of compile and first run; least recently used dropped first)",
    )
    compile_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="seconds a compile (validate, lower, gate, session) may take in its "
        "worker; past it the worker is replaced and the upload fails `COMPILE_TIMEOUT`",
    )
    compile_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="how much lower than inference's the OS priority of a worker's upload and "
        "check validation and lowering is (nice steps; the session is built at normal "
        "priority): compiles take the CPUs runs leave (at 10, ~1/10 of a CPU while runs keep "
        "every CPU busy: `compile_timeout_s` counts wall time); `0`: the same priority",
    )
    infer_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="the deadline of every inference; a client may ask for less (V2 "
        "`parameters.timeout` in microseconds, or `Graphgate-Timeout-Ms`); past it 504 "
        "`DEADLINE_EXCEEDED`",
    )
    quarantine_crashes: int = Field(
        default=3,
        ge=1,
        description="worker crashes by one model version, within `quarantine_window_s`, that "
        "quarantine it (503 `MODEL_QUARANTINED` until an admin releases it)",
    )
    quarantine_window_s: float = Field(
        default=600.0, gt=0, description="the window those crashes are counted in"
    )

    def policy(self) -> Policy:
        """The validator's Policy: POLICY_FIELDS from here, the rest its defaults."""
        return Policy(**{name: getattr(self, name) for name in POLICY_FIELDS})

    def session_options(self) -> SessionOptions:
        return SessionOptions(
            intra_op_threads=self.ort_intra_op_threads,
            inter_op_threads=self.ort_inter_op_threads,
            allow_spinning=self.ort_allow_spinning,
            spin_us=self.ort_spin_us,
            use_cuda=self.use_cuda,
            max_request_bytes=self.max_request_bytes,
            cuda_mem_limit_bytes=self.cuda_mem_limit_mb * 1024**2,
            cuda_arena_extend_strategy=self.cuda_arena_extend_strategy,
            cuda_graphs=self.cuda_graphs,
        )


# The largest value of a policy setting with no upper bound of its own (a BIGINT still holds it).
UNBOUNDED: Final = 2**62


def bounds_of(name: str) -> tuple[int, int]:
    """The (lowest, highest) value the setting `name` takes, from its declaration."""
    low, high = 0, UNBOUNDED
    for rule in Settings.model_fields[name].metadata:
        low = getattr(rule, "ge", low)
        high = getattr(rule, "le", high)
    return int(low), int(high)


def label_of(name: str) -> str:
    """A policy setting's description without its "policy: " prefix (the console's label)."""
    description = Settings.model_fields[name].description or name
    return description.removeprefix("policy: ")
