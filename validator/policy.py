"""Tenant policy: which registered ops are allowed, and every budget; plus ops no policy allows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Ops that touch files, network, devices or run user code or native engines (threats.md 1.4).
# No policy can allow them, whether or not an OpDef exists.
FORBIDDEN_OPS: Final = frozenset(
    {
        "save",
        "save_combine",
        "load",
        "load_combine",
        "checkpoint_notify",
        "recv_save",
        "sparse_tensor_load",
        "read_file",
        "decode_jpeg",
        "image_decode",
        "py_func",
        "print",
        "rpc_call",
        "rpc_result",
        "send",
        "recv",
        "send_v2",
        "recv_v2",
        "partial_send",
        "partial_recv",
        "send_barrier",
        "fetch_barrier",
        "prefetch",
        "listen_and_serv",
        "heter_listen_and_serv",
        "distributed_lookup_table",
        "gen_nccl_id",
        "barrier",
        "alltoall",
        "tensorrt_engine",
        "lite_engine",
        "cinn_launch",
        "run_program",
        "pylayer",
        "create_py_reader",
        "create_double_buffer_reader",
        "read",
        "open_files",
        "queue_generator",
        "enqueue",
        "dequeue",
        "fake_init",
        "delete_var",
        "share_data",
        "memcpy",
        "memcpy_d2h",
        "memcpy_h2d",
        "nop",
        "depend",
    }
)
_FORBIDDEN_PREFIXES: Final = ("c_", "partial_", "global_", "distributed_", "send_", "recv_")
_FORBIDDEN_SUFFIXES: Final = ("_engine", "_reader", "_barrier")

# Ops and markers of training programs: an inference service never runs them.
OPTIMIZER_OPS: Final = frozenset(
    {
        "sgd",
        "momentum",
        "lars_momentum",
        "adam",
        "adamw",
        "adamax",
        "adagrad",
        "decayed_adagrad",
        "adadelta",
        "rmsprop",
        "lamb",
        "ftrl",
        "dpsgd",
        "merged_adam",
        "merged_momentum",
        "fused_adam",
        "sparse_momentum",
        "average_accumulates",
        "check_finite_and_unscale",
        "update_loss_scaling",
        "clip_by_norm",
        "dgc_momentum",
    }
)
GRAD_MARKER: Final = "@GRAD"
# The highest trip bound any policy may set: the ONNX gate caps a Loop's M at this + 1, since the
# lowering runs one extra iteration to tell "finished within the bound" from "ran past it".
LOOP_TRIPS_CEILING: Final = 1023


def forbidden_reason(op_type: str) -> str | None:
    """Why an op is never allowed, or None when it is not in the forbidden families."""
    if op_type in FORBIDDEN_OPS:
        return f"op {op_type!r} touches files, network, devices or user code and is never allowed"
    if op_type.startswith(_FORBIDDEN_PREFIXES) or op_type.endswith(_FORBIDDEN_SUFFIXES):
        return (
            f"op {op_type!r} belongs to a collective, distributed, reader or engine family "
            "and is never allowed"
        )
    return None


def is_training_op(op_type: str) -> bool:
    return op_type.endswith("_grad") or op_type in OPTIMIZER_OPS


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """What one tenant may upload. Default-deny: an op runs only if registered and allowed here."""

    allowed_ops: frozenset[str] | None = None  # None: every registered op
    max_program_bytes: int = 64 * 1024 * 1024
    max_params_bytes: int = 4 * 1024**3
    max_ops: int = 10_000
    # Validation cost is linear in blocks, about 2 ms per block of a cond (benchmarks/
    # bench_blocks.py: 73 blocks 148 ms, 1025 blocks 1.4 s on 2 CPUs), no more than the ~3-4
    # ops each holds: 1024 blocks cost less than max_ops' worth of ops (10,000 ops ~6 s), and
    # take conformer_encoder's 73 with room to spare.
    max_blocks: int = 1024
    max_nesting: int = 8
    max_vars: int = 100_000
    max_attrs_per_op: int = 128
    max_attr_items: int = 1 << 20  # elements in one list attribute (assign_value constants)
    max_slot_args: int = 4096  # variables in one slot (concat inputs, split outputs)
    max_name_length: int = 200
    max_feeds: int = 64
    max_fetches: int = 64
    max_dim: int = 2**31 - 1  # any one declared dim
    max_tensor_bytes: int = 2 * 1024**3  # any one tensor, at the max batch
    max_batch: int = 32  # the batch size every budget is evaluated at
    max_dynamic_dim: int = 512  # what any other unknown dim of a feed is evaluated at
    max_activation_bytes_per_sample: int = 1024**3
    max_flops_per_sample: int = 200 * 10**9
    # Paddle's while has no bound of its own: every loop gets this one, enforced at run time
    # (a typed error past it, never a truncated result). None: this tenant may not run loops.
    max_loop_trips: int | None = 1000

    def __post_init__(self) -> None:
        if self.max_loop_trips is not None and not 0 <= self.max_loop_trips <= LOOP_TRIPS_CEILING:
            raise ValueError(
                f"max_loop_trips: expected None or 0..{LOOP_TRIPS_CEILING}, got {self.max_loop_trips}"
            )

    def allows(self, op_type: str) -> bool:
        return self.allowed_ops is None or op_type in self.allowed_ops


DEFAULT_POLICY: Final = Policy()
