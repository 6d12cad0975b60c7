"""interp `scale` as the program carries it: a legacy FLOATS attr holds float32 values, a PIR
program's FLOAT64S the doubles Paddle's PIR kernel multiplies (its parity with Paddle: the
resize-nearest_scale_dynamic_double_product case of tests/conformance/test_ops_parity.py)."""

from __future__ import annotations

import pytest

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr
from tests.ops.cases import infer_case
from validator.ops import Case, f32
from validator.ops.resize import NEAREST_INTERP_V2

_ATTRS = {"interp_method": "nearest", "align_corners": False, "align_mode": 0}


@pytest.mark.parametrize(
    ("kind", "dims"),
    [
        # float32(1.3) = 1.29999995, float32(0.7) = 0.69999999: 12.9999995 -> 12, 6.9999999 -> 6
        (pb.FLOATS, (1, 2, 12, 6)),
        # 10 * 1.3 = 13.000000000000002 and 10 * 0.7 = 7.0 in double
        (pb.FLOAT64S, (1, 2, 13, 7)),
    ],
    ids=["floats", "float64s"],
)
def test_the_scale_is_multiplied_at_the_precision_the_program_carries(
    kind: int, dims: tuple[int, ...]
) -> None:
    case = Case({"X": f32(1, 2, 10, 10)}, {**_ATTRS, "scale": Attr(kind, [1.3, 0.7])})
    (out,) = infer_case(NEAREST_INTERP_V2, case)
    assert out.shape == dims
