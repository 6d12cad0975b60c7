"""The registry of every op graphgate understands, built from each family's explicit OPS tuple."""

from __future__ import annotations

from typing import Final

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
from validator.ops._def import OpDef, Registry

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

__all__ = ["FAMILIES", "REGISTRY", "OpDef", "Registry"]
