"""Every op's batch rule, checked against the executor: for every valid op case, each input slot
(and all of them together) is batched by concatenating three different samples along axis 0;
the op runs once on the batch and once per sample. Where the rule says rows stay apart, the
batched outputs equal the per-sample outputs concatenated on the declared axis (float32 within
rtol 1e-5, integers exactly); where it says they couple, some case shows the difference."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Final

import numpy as np
import pytest

from executor.lower import BOUNDARY_OPS
from tests.ops.cases import decoded_attrs, tensor_type
from tests.ops.lowered import run_lowered
from validator.batch import output_axes
from validator.infer import infer_values
from validator.ops import REGISTRY, BatchView, Case, Couples, GraphError, OpDef, TensorType

SAMPLES: Final = 3
# Ops whose coupling declaration is conservative: no case can show rows interacting.
CONSERVATIVE: Final[dict[str, str]] = {
    "flatten_contiguous_range": "folding the batch dim with the dims after it keeps each row's "
    "elements together, so the op's cases agree; but Out's dim 0 is then rows x k, not the "
    "request count, and the batcher splits outputs by rows: declared coupling",
}


@dataclasses.dataclass(frozen=True)
class Outcome:
    config: tuple[str, ...]  # the batched slots
    declared: dict[str, int | None] | str  # output axes, or the Couples message
    differs: bool  # the batched run differs from (or cannot match) the per-sample runs
    detail: str = ""


def _eligible(value: Any) -> bool:
    arrays = value if isinstance(value, tuple) else (value,)
    return bool(arrays) and all(a.ndim >= 1 and a.shape[0] > 0 for a in arrays)


def _configs(case: Case) -> list[tuple[str, ...]]:
    slots = [s for s, v in case.inputs.items() if _eligible(v)]
    configs: list[tuple[str, ...]] = [(s,) for s in slots]
    if len(slots) > 1:
        configs.append(tuple(slots))
    return configs


def _symbolic(array: np.ndarray) -> TensorType:
    t = tensor_type(array)
    return TensorType(t.dtype, (-1, *t.shape[1:]))


def _view(op: OpDef, case: Case, config: tuple[str, ...]) -> BatchView | None:
    """The rule's view with the batched slots' dim 0 unknown, as a feed's -1 makes it."""
    axes: dict[str, tuple[int | None, ...]] = {}
    types_in: dict[str, tuple[TensorType, ...]] = {}
    typed: list[Any] = []
    for slot in op.inputs:
        value = case.inputs.get(slot.slot)
        arrays = () if value is None else value if isinstance(value, tuple) else (value,)
        batched = slot.slot in config
        types = tuple(_symbolic(a) if batched else tensor_type(a) for a in arrays)
        axes[slot.slot] = tuple(0 if batched else None for _ in arrays)
        types_in[slot.slot] = types
        typed.append(None if value is None else types if isinstance(value, tuple) else types[0])
    try:
        results = infer_values(op, typed, decoded_attrs(op, case))
    except GraphError:
        return None  # the op refuses an unknown dim 0 there: no program could batch it
    types_out = {
        o.slot: r if isinstance(r, tuple) else (r,)
        for o, r in zip(op.used_outputs, results, strict=True)
    }
    return BatchView(axes, types_in, types_out, decoded_attrs(op, case))


def _perturbed(array: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Another sample in the same domain (positive stays positive, indices stay in range)."""
    return rng.permutation(array.reshape(-1)).reshape(array.shape)


def _samples(case: Case, config: tuple[str, ...], seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    samples = [case]
    for _ in range(SAMPLES - 1):
        inputs = dict(case.inputs)
        for slot in config:
            v = inputs[slot]
            inputs[slot] = (
                tuple(_perturbed(a, rng) for a in v) if isinstance(v, tuple) else _perturbed(v, rng)
            )
        samples.append(dataclasses.replace(case, inputs=inputs))
    return samples


def _concat(samples: list[Case], config: tuple[str, ...]) -> Case:
    inputs = dict(samples[0].inputs)
    for slot in config:
        first = inputs[slot]
        if isinstance(first, tuple):
            inputs[slot] = tuple(
                np.concatenate([s.inputs[slot][i] for s in samples]) for i in range(len(first))
            )
        else:
            inputs[slot] = np.concatenate([s.inputs[slot] for s in samples])
    return dataclasses.replace(samples[0], inputs=inputs)


def _flat_axes(op: OpDef, view: BatchView, axes: dict[str, int | None]) -> list[int | None]:
    return [axes.get(o.slot) for o in op.used_outputs for _ in view.types_out[o.slot]]


def _mismatch(got: np.ndarray, want: np.ndarray, case: Case) -> str:
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"dims {list(got.shape)} {got.dtype} vs {list(want.shape)} {want.dtype}"
    if np.issubdtype(want.dtype, np.floating):
        ok = np.allclose(got, want, rtol=min(case.rtol, 1e-5), atol=case.atol, equal_nan=True)
    else:
        ok = np.array_equal(got, want)
    return "" if ok else "values differ"


def _run(op: OpDef, case: Case, config: tuple[str, ...], seed: int) -> Outcome:
    view = _view(op, case, config)
    assert view is not None
    try:
        declared: dict[str, int | None] | str = output_axes(op, view)
    except Couples as e:
        declared = str(e)
    samples = _samples(case, config, seed)
    per_sample = [run_lowered(op, s) for s in samples]
    try:
        batched = run_lowered(op, _concat(samples, config))
    except GraphError as e:
        return Outcome(config, declared, True, f"batched inputs refused: {e}")
    axes = _flat_axes(op, view, declared) if isinstance(declared, dict) else [0] * len(batched)
    problems = []
    for i, (got, axis) in enumerate(zip(batched, axes, strict=True)):
        outs = [r[i] for r in per_sample]
        if axis is not None and outs[0].ndim <= axis:
            problems.append(f"output {i} has no axis {axis} to batch on")
            continue
        want = outs[0] if axis is None else np.concatenate(outs, axis=axis)
        if problem := _mismatch(got, want, case):
            problems.append(f"output {i} (batch axis {axis}): {problem}")
    return Outcome(config, declared, bool(problems), "; ".join(problems))


@functools.cache
def outcomes(op_type: str, index: int) -> tuple[Outcome, ...]:
    op = REGISTRY.get(op_type)
    assert op is not None
    case = op.cases[index]
    seed = hash((op_type, index)) % 2**32
    return tuple(
        _run(op, case, config, seed + n)
        for n, config in enumerate(_configs(case))
        if _view(op, case, config) is not None
    )


RUNNABLE = [
    pytest.param(op.op_type, i, id=f"{op.op_type}-{i}")
    for op in REGISTRY
    if op.op_type not in BOUNDARY_OPS
    for i, case in enumerate(op.cases)
    if case.expect is not None
]


def test_every_op_declares_a_batch_rule() -> None:
    assert [op.op_type for op in REGISTRY if op.batch is None] == []


@pytest.mark.parametrize(("op_type", "index"), RUNNABLE)
def test_rows_declared_apart_run_the_same_batched(op_type: str, index: int) -> None:
    wrong = [f"{o.config}: {o.detail}" for o in _apart(op_type, index) if o.differs]
    assert wrong == []


def _apart(op_type: str, index: int) -> list[Outcome]:
    return [o for o in outcomes(op_type, index) if isinstance(o.declared, dict)]


def test_every_coupling_declaration_is_shown_by_a_case() -> None:
    """An op whose rule couples rows somewhere has a case where batching really changes the
    outputs, or a reason in CONSERVATIVE."""
    coupled: dict[str, list[Outcome]] = {}
    for param in RUNNABLE:
        op_type, index = param.values
        assert isinstance(op_type, str) and isinstance(index, int)
        for o in outcomes(op_type, index):
            if isinstance(o.declared, str):
                coupled.setdefault(str(op_type), []).append(o)
    unshown = sorted(
        op
        for op, found in coupled.items()
        if not any(o.differs for o in found) and op not in CONSERVATIVE
    )
    assert unshown == []
    assert sorted(set(CONSERVATIVE) - set(coupled)) == []
