"""The registry of every op graphgate understands, built from each family's explicit OPS tuple."""

from __future__ import annotations

from typing import Final

# What the rest of graphgate uses of the op machinery, exported here so that no module outside
# validator/ops imports its private modules. Bound before the families are imported: a family
# may import a validator module that imports these names from this package.
from validator.ops._cases import f32
from validator.ops._def import (
    BatchView,
    Case,
    Couples,
    DTypeError,
    GraphError,
    In,
    NoAttrs,
    OpDef,
    Out,
    Registry,
    Scalar,
    ShapeError,
    TensorType,
)
from validator.ops._operands import Operand, int_operand, int_scalar
from validator.ops._shape import norm_axes, norm_axis

# isort: split
from validator.ops import (
    activation,
    control,
    creation,
    detection,
    elementwise,
    index,
    io,
    linalg,
    manipulation,
    nn,
    norm,
    pool,
    reduce,
    resize,
    rnn,
    slicing,
    spatial,
    unary_math,
)

FAMILIES: Final = (
    io,
    elementwise,
    activation,
    unary_math,
    nn,
    pool,
    norm,
    resize,
    spatial,
    index,
    manipulation,
    slicing,
    reduce,
    linalg,
    creation,
    rnn,
    detection,
    control,
)
REGISTRY: Final = Registry(*(family.OPS for family in FAMILIES))

__all__ = [
    "FAMILIES",
    "REGISTRY",
    "BatchView",
    "Case",
    "Couples",
    "DTypeError",
    "GraphError",
    "In",
    "NoAttrs",
    "OpDef",
    "Operand",
    "Out",
    "Registry",
    "Scalar",
    "ShapeError",
    "TensorType",
    "f32",
    "int_operand",
    "int_scalar",
    "norm_axes",
    "norm_axis",
]
