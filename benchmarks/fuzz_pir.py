"""A time-bounded mutation fuzzer over the PIR reader (graph_proto/pir.py, pir_json.py), run the
way `POST /v1/check` runs an upload: validate(), then the lowering and ONNX gate.

Seeds: the PIR programs the tests already hold (tests/graph_proto/data/*.json, written by Paddle
3.3.1); with --paddle, the PIR twins of a few conformance programs exported by Paddle now; with
--corpus MIB, the toolkit corpus' PIR programs (tests/corpus's cached exports) up to MIB each.
Each mutation is a JSON edit (a leaf replaced by a hostile value, a key or list item deleted or
duplicated, ops swapped, a value id or dims made huge) or a byte edit (flips, cuts, a run of
escaped quotes or brackets spliced in). Every outcome is one of:
  refused  - ValidationFailed, or a GraphError from the lowering/gate: a 4xx with a code;
  accepted - the mutation was harmless;
  crash    - any other exception (a 500 in the service);
  slow     - more than --slow seconds (2 s): a hang holding a compile slot;
  memory   - MemoryError under the address-space cap (--memory-gib): a worker killed.
Exit status 1 when any mutation crashed, ran slow or ran out of memory; the first few of each
are printed with the seed that reproduces them.

    PYTHONPATH=. .venv/bin/python benchmarks/fuzz_pir.py --seconds 300 [--corpus 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import resource
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from executor.session import prepare
from validator import ValidationFailed, validate
from validator.ops import GraphError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "graph_proto" / "data"

Seed = tuple[str, bytes, bytes | None]


class _Slow(Exception):
    pass


def fixture_seeds() -> list[Seed]:
    params = (DATA / "pir_cnn.pdiparams").read_bytes()
    return [
        ("pir_cnn", (DATA / "pir_cnn.json").read_bytes(), params),
        ("pir_control_flow", (DATA / "pir_control_flow.json").read_bytes(), None),
    ]


def paddle_seeds() -> list[Seed]:
    """Conformance programs of tests/conformance/test_pir.py, exported as PIR by Paddle now
    (imports paddle: slow): a transformer, an LSTM with lengths and initial states, the text
    classifier, nested loops, a cond, a vision model."""
    from tests.conformance import control_flow, models, rnn
    from tests.conformance import text_classifier as text
    from tests.conformance.pir_util import save_pir, vision_build

    builds = {
        "transformer": models.transformer_network("relu"),
        "lstm": rnn.rnn_program("LSTM", 2, True, True, True),
        "text_classifier": text.network,
        "nested_while": control_flow.nested_while,
        "cond_shapes": control_flow.cond_with_different_shapes,
        "mobilenet_v3_small": vision_build("mobilenet_v3_small"),
    }
    seeds: list[Seed] = []
    for name, build in builds.items():
        saved = save_pir(build)
        seeds.append((name, saved.program, saved.params))
    return seeds


def corpus_seeds(limit_bytes: int) -> list[Seed]:
    """The toolkit corpus' PIR programs (tests/corpus: PaddleClas, PaddleSeg, PaddleDetection,
    PaddleOCR, PaddleNLP, PaddleSpeech), as its tests exported and cached them; the programs
    of at most `limit_bytes` (a mutation copies the whole document: large ones mutate slowly).
    Run the corpus tests once first (GRAPHGATE_CORPUS=full) to have them all."""
    from bench_validate import corpus_programs  # imports Paddle (the export cache's key)

    seeds: list[Seed] = []
    for key, (program, params) in corpus_programs().items():
        if key.endswith("(pir)") and Path(program).stat().st_size <= limit_bytes:
            blob = Path(params).read_bytes() if params else None
            seeds.append((key, Path(program).read_bytes(), blob))
    return seeds


# Values a hostile tenant would put in a leaf.
HOSTILE: list[Any] = [
    None,
    True,
    0,
    -1,
    1,
    999,
    2**31,
    2**62,
    -(2**63),
    1e308,
    -0.0,
    "",
    "1.full",
    "1.while",
    "1.if",
    "0.t_vec",
    "2.yield",
    "p",
    "x" * 300,
    [],
    {},
    [2**62, 2**62],
    [1_000_000_000],
    [-1, -1, -1],
    {"%": 999},
    [{"%": 999}],
    {"#": "0.a_i64", "D": 2**62},
    {"#": "1.a_intarray", "D": [2**40]},
]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(_paths(child, (*path, key)))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found.extend(_paths(child, (*path, i)))
    return found


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def json_mutation(rng: random.Random, doc: Any, paths: list[tuple[Any, ...]]) -> bytes:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths)
        if not path:
            continue
        try:
            parent = _parent(doc, path)
            key = path[-1]
            kind = rng.random()
            if kind < 0.55:
                parent[key] = copy.deepcopy(rng.choice(HOSTILE))
            elif kind < 0.7:
                del parent[key]
            elif kind < 0.8 and isinstance(parent, list):
                parent.insert(key, copy.deepcopy(parent[key]))
            elif kind < 0.9 and isinstance(parent, list) and len(parent) > 1:
                other = rng.randrange(len(parent))
                parent[key], parent[other] = parent[other], parent[key]
            elif isinstance(parent[key], int) and not isinstance(parent[key], bool):
                parent[key] = rng.choice([parent[key] + 1, -parent[key], parent[key] * 2**20])
        except (KeyError, IndexError, TypeError):
            continue
    return json.dumps(doc, separators=(",", ":")).encode()


def byte_mutation(rng: random.Random, data: bytes) -> bytes:
    kind = rng.random()
    at = rng.randrange(len(data))
    if kind < 0.4:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if kind < 0.6:
        return data[:at]
    runs = [b'\\"' * 40_000, b"[" * 10_000, b'{"a":' * 2_000, b'"' * 1000, b"\\" * 5000]
    return data[:at] + rng.choice(runs) + data[at:]


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Slow


def run_one(program: bytes, params: bytes | None, slow_s: float) -> tuple[str, str]:
    """(outcome, traceback where it crashed)."""
    signal.setitimer(signal.ITIMER_REAL, slow_s)
    try:
        validated = validate(program, params)
        prepare(validated)
        return "accepted", ""
    except (ValidationFailed, GraphError):
        return "refused", ""
    except _Slow:
        return "slow", ""
    except MemoryError:
        return "memory", ""
    except Exception:  # what the fuzzer is looking for
        return "crash", traceback.format_exc(limit=-4)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


Doc = tuple[str, Any, bytes, bytes | None]


def mutation(
    case_seed: int, docs: list[Doc], paths: dict[str, list[tuple[Any, ...]]]
) -> tuple[str, bytes, bytes | None]:
    """The mutated upload a case seed stands for: (seed program, bytes, params)."""
    case = random.Random(case_seed)
    name, doc, program, params = case.choice(docs)
    if case.random() < 0.8:
        return name, json_mutation(case, doc, paths[name]), params
    return name, byte_mutation(case, program), params


def replay(case_seed: int, docs: list[Doc], paths: dict[str, list[tuple[Any, ...]]]) -> int:
    name, mutated, params = mutation(case_seed, docs, paths)
    for _ in range(5):
        started = time.perf_counter()
        outcome, detail = run_one(mutated, params, 60.0)
        print(f"{name} case {case_seed}: {outcome} in {time.perf_counter() - started:.3f} s")
        print(detail, end="")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slow", type=float, default=2.0)
    parser.add_argument("--memory-gib", type=float, default=4.0)
    parser.add_argument("--paddle", action="store_true", help="also seed with Paddle exports")
    parser.add_argument(
        "--corpus",
        type=float,
        metavar="MIB",
        help="also seed with the corpus' cached PIR programs of at most MIB each",
    )
    parser.add_argument("--replay", type=int, help="time one case seed (as printed) 5 times")
    args = parser.parse_args()
    seeds = fixture_seeds() + (paddle_seeds() if args.paddle else [])
    if args.corpus is not None:
        seeds += corpus_seeds(int(args.corpus * 1024 * 1024))
    limit = int(args.memory_gib * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    docs: list[Doc] = [
        (name, json.loads(program), program, params) for name, program, params in seeds
    ]
    paths = {name: _paths(doc) for name, doc, _, _ in docs}
    if args.replay is not None:
        return replay(args.replay, docs, paths)
    rng = random.Random(args.seed)
    outcomes: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    slowest = 0.0
    deadline = time.monotonic() + args.seconds
    count = 0
    while time.monotonic() < deadline:
        case_seed = rng.randrange(2**32)
        name, mutated, params = mutation(case_seed, docs, paths)
        started = time.perf_counter()
        outcome, detail = run_one(mutated, params, args.slow)
        slowest = max(slowest, time.perf_counter() - started)
        outcomes[outcome] += 1
        count += 1
        if outcome in ("crash", "slow", "memory"):
            found = examples.setdefault(outcome, [])
            if len(found) < 5:
                found.append(f"{name} case seed {case_seed}\n{detail}")
    print(f"seeds: {', '.join(name for name, *_ in docs)}")
    print(f"{count} mutations in {args.seconds:.0f} s: {dict(outcomes)}")
    print(f"slowest: {slowest:.3f} s (limit {args.slow} s)")
    for outcome, found in examples.items():
        print(f"-- {outcome}:")
        for line in found:
            print(line)
    return 1 if examples else 0


if __name__ == "__main__":
    sys.exit(main())
