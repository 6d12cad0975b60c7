"""The validation report: signature, op histogram, parameters and cost figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph_proto.types import DType, Shape
from validator.diagnostics import Diagnostic
from validator.dims import DimConstraint


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output of the program's signature."""

    name: str
    dtype: DType
    dims: Shape

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype.label, "dims": list(self.dims)}


@dataclass(frozen=True, slots=True)
class Report:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    op_histogram: dict[str, int]
    op_count: int
    param_count: int
    param_bytes: int
    batch: int
    flops_per_sample: int
    peak_activation_bytes_per_sample: int
    largest_tensor_bytes: int
    data_dependent: tuple[str, ...] = ()  # vars sized by input data: checked per request
    # Proven safe to run requests concatenated along axis 0 (validator/batch.py); when not,
    # the first op that couples rows ("block 0, op 17 (reduce_mean): reduces over ...").
    batchable: bool = False
    batch_coupling: str | None = None
    warnings: tuple[Diagnostic, ...] = ()
    # Each input's dims with its unknown ones named: B the batch, D1, D2, ... the others
    # (one name where the program ties two dims together), a number where it fixes one.
    symbolic_inputs: tuple[tuple[str, tuple[int | str, ...]], ...] = ()
    # What the program requires of those dims, checked on every request before it runs.
    dim_constraints: tuple[DimConstraint, ...] = ()
    # The size each symbol's budgets are computed at: B at max_batch, the others at
    # max_dynamic_dim or what the upload declared (`dims`, `--dim`).
    dim_bounds: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "op_histogram": dict(self.op_histogram),
            "op_count": self.op_count,
            "params": {"count": self.param_count, "bytes": self.param_bytes},
            "cost": {
                "batch": self.batch,
                "flops_per_sample": self.flops_per_sample,
                "peak_activation_bytes_per_sample": self.peak_activation_bytes_per_sample,
                "largest_tensor_bytes": self.largest_tensor_bytes,
                "sized_by_input_data": list(self.data_dependent),
            },
            "batchable": self.batchable,
            "batch_coupling": self.batch_coupling,
            "warnings": [w.to_json() for w in self.warnings],
            "symbolic_inputs": {name: list(dims) for name, dims in self.symbolic_inputs},
            "dim_constraints": [c.to_json() for c in self.dim_constraints],
            "dim_bounds": dict(self.dim_bounds),
        }
