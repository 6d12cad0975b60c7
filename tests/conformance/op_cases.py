"""One op program Paddle builds, and how graphgate's run of it is compared with Paddle's.

Each family's module (families/<family>.py) declares a table of cases: data only.
test_ops_parity.py checks every case of every table the same way: the dims graphgate infers
against the dims Paddle records, and graphgate's outputs against Paddle's Executor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, NamedTuple

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.pdiparams import write_params
from graph_proto.pir import looks_like_pir, parse_pir
from tests.conformance.paddle_util import Saved, build_and_save, paddle, random_feeds
from validator import DEFAULT_POLICY, Policy, ValidatedProgram, validate
from validator.ops import REGISTRY, Registry

Build = Callable[[], tuple[Sequence[Any], Sequence[Any]]]
Feeds = dict[str, np.ndarray]
# Replaces some random feeds with values Paddle's kernel needs (positive, wide, ties...).
Adjust = Callable[[Feeds], Mapping[str, np.ndarray]]

TOLERANCE: Final = (1e-4, 1e-5)  # (rtol, atol) for float outputs, as assert_parity's defaults
BATCH: Final = "batch"  # int_high for indices into axis 0: the batch size of each run


def program(fn: Callable[..., Any], *feeds: tuple[list[int], str]) -> Build:
    """`fn(*vars)` on feeds x0, x1... of (shape, dtype); its result (or results) are fetched."""

    def build() -> tuple[list[Any], list[Any]]:
        xs = [paddle.static.data(f"x{i}", shape, dtype) for i, (shape, dtype) in enumerate(feeds)]
        out = fn(*xs)
        return xs, list(out) if isinstance(out, (tuple, list)) else [out]

    return build


def binary(
    fn: Callable[[Any, Any], Any], x_shape: list[int], y_shape: list[int], dtype: str = "float32"
) -> Build:
    """`fn(x, y)` on feeds x and y of one dtype."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", x_shape, dtype)
        y = paddle.static.data("y", y_shape, dtype)
        return [x, y], [fn(x, y)]

    return build


class Size(NamedTuple):
    """The sizes of one run: -1 dims on axis 0 take `batch`, other -1 dims `dynamic`."""

    batch: int
    dynamic: int
    seed: int = 0  # of the random feeds


def sizes(
    batches: Sequence[int], dynamics: Sequence[int], seeds: Sequence[int]
) -> tuple[Size, ...]:
    """Every batch with every dynamic size; seeds[i] for the runs of dynamics[i]."""
    return tuple(Size(b, d, s) for d, s in zip(dynamics, seeds, strict=True) for b in batches)


@dataclass(frozen=True)
class Case:
    """A program Paddle builds, and the runs that compare graphgate's outputs with Paddle's."""

    op_type: str  # an op the saved program must contain
    build: Build
    sizes: tuple[Size, ...] = (Size(1, 2, 0), Size(3, 5, 1))
    adjust: Adjust | None = None
    # Feeds set outright: each mapping is one more run at every size (ints only known at run time).
    values: tuple[Mapping[str, np.ndarray], ...] = ({},)
    int_high: int | Literal["batch"] = 4  # integer feeds are drawn from [0, int_high)
    tolerance: tuple[float, float] = TOLERANCE  # (rtol, atol)
    random_params: bool = False  # replaces Paddle's constant initial parameters
    policy: Policy = DEFAULT_POLICY
    registry: Registry = REGISTRY
    prepare: Callable[[Saved], Saved] | None = None  # an edit of the program Paddle saved
    dims: bool = True  # graphgate's inferred dims must equal what Paddle records
    outputs: bool = True  # Paddle's Executor runs it (see the table's notes where it does not)

    def saved(self) -> Saved:
        saved = build_and_save(self.build)
        return self.prepare(saved) if self.prepare is not None else saved

    def saved_pir(self) -> Saved:
        """The same build traced as a PIR program (model.json). `prepare` edits legacy bytes
        only: the PIR twin is the program exactly as Paddle 3 saves it."""
        from tests.conformance.pir_util import save_pir

        return save_pir(self.build)

    def validate(self, saved: Saved) -> ValidatedProgram:
        return validate(saved.program, saved.params, self.policy, self.registry)

    def feed_runs(self, validated: ValidatedProgram) -> Iterator[Feeds]:
        for size in self.sizes:
            high = self.int_high if isinstance(self.int_high, int) else size.batch
            for values in self.values:
                feeds = random_feeds(
                    validated, batch=size.batch, dynamic=size.dynamic, int_high=high, seed=size.seed
                )
                feeds |= dict(self.adjust(feeds)) if self.adjust is not None else {}
                yield feeds | dict(values)


def randomized(saved: Saved, seed: int = 0) -> Saved:
    """Random parameters (positive running variances) in place of Paddle's constant initial
    ones (PReLU's alpha 0.25 everywhere, zero mean, unit variance and scale, zero bias), which
    would hide a channel or an operand mixed up with another."""
    if saved.params is None:
        return saved
    program = (
        parse_pir(saved.program, max_bytes=1 << 30).program
        if looks_like_pir(saved.program)
        else pb.ProgramDesc.FromString(saved.program)
    )
    block = program.blocks[0]
    variances = {
        name
        for op in block.ops
        for v in op.inputs
        if v.parameter == "Variance"
        for name in v.arguments
    }
    validated = validate(saved.program, saved.params)
    rng = np.random.default_rng(seed)
    tensors = []
    for name in sorted(validated.params):
        like = validated.params[name]
        value = (
            rng.uniform(0.5, 1.5, like.shape)
            if name in variances
            else rng.standard_normal(like.shape)
        )
        tensors.append((validated.types[name].dtype, value.astype(like.dtype)))
    return replace(saved, params=write_params(tensors))
