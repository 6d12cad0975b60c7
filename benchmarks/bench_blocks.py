"""What sub-blocks cost the validator: programs of K chained conds (paddle.static.nn.cond as
Paddle exports it: two conditional_blocks, logical_not, cast, select_input; 2 blocks each),
validated at 1 + 2K blocks. The policy's max_blocks is set from these figures.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_blocks.py
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr, ProgramBuilder
from graph_proto.types import DType
from validator import DEFAULT_POLICY, validate

FP32, BOOL, INT32 = DType.FP32, DType.BOOL, DType.INT32


def chained_conds(count: int) -> ProgramBuilder:
    g = ProgramBuilder()
    g.feed("x0", FP32, [-1, 4])
    g.var("zero", FP32, [])
    g.op("fill_constant", {}, {"Out": ["zero"]},
         {"shape": Attr(pb.LONGS, []), "dtype": int(FP32), "value": 0.0})  # fmt: skip
    for k in range(count):
        x, out = f"x{k}", f"x{k + 1}"
        names = {n: f"{n}{k}" for n in ("m", "p", "not_p", "mask", "yes", "no", "s1", "s2")}
        for n, dtype, dims in [("m", FP32, []), ("p", BOOL, []), ("not_p", BOOL, []),
                               ("mask", INT32, []), ("yes", FP32, [-1, 4]), ("no", FP32, [-1, 4])]:  # fmt: skip
            g.var(names[n], dtype, dims)
        g.var(out, FP32, [-1, 4])
        g.var(names["s1"], None, vartype=pb.VarType.STEP_SCOPES)
        g.var(names["s2"], None, vartype=pb.VarType.STEP_SCOPES)
        g.op("reduce_mean", {"X": [x]}, {"Out": [names["m"]]}, {"dim": [], "reduce_all": True})
        g.op("greater_than", {"X": [names["m"]], "Y": ["zero"]}, {"Out": [names["p"]]})
        then_block, else_block = g.add_block(0), g.add_block(0)
        g.var(f"t1_{k}", FP32, [-1, 4], block=then_block)
        g.var(f"t2_{k}", FP32, [-1, 4], block=else_block)
        g.op("conditional_block", {"Cond": [names["p"]], "Input": [x]},
             {"Out": [names["yes"]], "Scope": [names["s1"]]},
             {"sub_block": Attr(pb.BLOCK, then_block), "is_scalar_condition": True})  # fmt: skip
        g.op("scale", {"X": [x]}, {"Out": [f"t1_{k}"]}, {"bias": 1.0}, block=then_block)
        g.op("assign", {"X": [f"t1_{k}"]}, {"Out": [names["yes"]]}, block=then_block)
        g.op("logical_not", {"X": [names["p"]]}, {"Out": [names["not_p"]]})
        g.op("conditional_block", {"Cond": [names["not_p"]], "Input": [x]},
             {"Out": [names["no"]], "Scope": [names["s2"]]},
             {"sub_block": Attr(pb.BLOCK, else_block), "is_scalar_condition": True})  # fmt: skip
        g.op("scale", {"X": [x]}, {"Out": [f"t2_{k}"]}, {"scale": 2.0}, block=else_block)
        g.op("assign", {"X": [f"t2_{k}"]}, {"Out": [names["no"]]}, block=else_block)
        g.op("cast", {"X": [names["p"]]}, {"Out": [names["mask"]]},
             {"in_dtype": int(BOOL), "out_dtype": int(INT32)})  # fmt: skip
        g.op("select_input", {"Mask": [names["mask"]], "X": [names["no"], names["yes"]]},
             {"Out": [out]})  # fmt: skip
    g.fetch(f"x{count}")
    return g


def main() -> int:
    policy = replace(DEFAULT_POLICY, max_blocks=10_000, max_ops=100_000)
    print("| blocks | ops | validate (median of 5) | per block |")
    print("|---|---|---|---|")
    for count in (8, 36, 64, 128, 256, 512):
        g = chained_conds(count)
        data = g.program_bytes()
        times = []
        for _ in range(5):
            started = time.perf_counter()
            validated = validate(data, None, policy)
            times.append(time.perf_counter() - started)
        blocks, ops = 1 + 2 * count, validated.report.op_count
        median = statistics.median(times)
        print(f"| {blocks} | {ops} | {median * 1000:.1f} ms | {median / blocks * 1000:.2f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
