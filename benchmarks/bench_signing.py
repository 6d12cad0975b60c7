"""What verifying a signed upload costs, against what the upload costs without it, same run.

Usage: python benchmarks/bench_signing.py [--rounds N]

1. The check alone (server/dispatch/signing.py `verify`, key mode, in this process) against
   hashing the same bytes once with sha256 (what every upload already does: Digests.of), for
   a small model and one with ~32 MiB of parameters. The check parses the bundle, hashes the
   files, writes them to a private folder and lets model_signing hash them again and check the
   signature: its ratio to one sha256 pass is the figure to read.
2. Upload -> 201 through one app in-process (TestClient, embedded storage), signed against
   unsigned, alternating, median of N each: the share of an upload the check adds.
Writes benchmarks/results/signing.md.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.dispatch.signing import SigningTrust, verify  # noqa: E402
from server.main import create_app  # noqa: E402
from server.settings import Settings  # noqa: E402
from tests.support.api import ADMIN_TOKEN, auth  # noqa: E402
from tests.support.builders import Built, affine, mlp  # noqa: E402
from tests.support.signing_material import ec_key_pair, sign_with_key  # noqa: E402

KEY = ec_key_pair()
TRUST = SigningTrust(keys=(KEY.public_pem,))


def files_of(built: Built) -> dict[str, bytes]:
    return {"model.pdmodel": built.program, "model.pdiparams": built.params or b""}


def median_s(work: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def check_alone(name: str, built: Built, rounds: int, scratch: Path) -> str:
    files = files_of(built)
    bundle = sign_with_key(KEY, files, scratch / name)
    verify(bundle, files, TRUST, datetime.now(UTC))  # the first call imports model_signing

    def sha256_once() -> None:
        for data in files.values():
            hashlib.sha256(data).digest()

    baseline = median_s(sha256_once, rounds)
    checked = median_s(lambda: verify(bundle, files, TRUST, datetime.now(UTC)), rounds)
    size = sum(map(len, files.values())) / 2**20
    # Below a millisecond of hashing the check's fixed cost is the figure, not a ratio.
    ratio = f"{checked / baseline:.1f}x" if baseline >= 1e-3 else "-"
    return (
        f"| {name} | {size:.2f} MiB | {baseline * 1e3:.2f} ms | {checked * 1e3:.2f} ms | {ratio} |"
    )


def uploads(name: str, built: Built, rounds: int, scratch: Path) -> str:
    files = files_of(built)
    bundle = sign_with_key(KEY, files, scratch / f"upload-{name}")
    settings = Settings(data_dir=scratch / f"data-{name}", admin_token=SecretStr(ADMIN_TOKEN))
    with TestClient(create_app(settings)) as client:
        admin = auth(ADMIN_TOKEN)
        key = client.post("/v1/admin/tenants", json={"name": "bench"}, headers=admin).json()
        client.put(
            "/v1/admin/tenants/bench/policy", json={"signing_keys": KEY.public_pem}, headers=admin
        )
        (program_name, program), (params_name, params) = files.items()
        form = {"program": (program_name, program), "params": (params_name, params)}

        def post(signed: bool) -> None:
            sent = {**form, **({"signature": ("model.sig", bundle)} if signed else {})}
            answer = client.post(
                "/v1/models", data={"name": "m"}, files=sent, headers=auth(key["key"])
            )
            assert answer.status_code == 201, answer.text

        post(True)  # warm: the worker imports model_signing once
        plain, signed = [], []
        for _ in range(rounds):
            plain.append(median_s(lambda: post(False), 1))
            signed.append(median_s(lambda: post(True), 1))
    unsigned_s, signed_s = statistics.median(plain), statistics.median(signed)
    return (
        f"| {name} | {unsigned_s * 1e3:.0f} ms | {signed_s * 1e3:.0f} ms | "
        f"{signed_s / unsigned_s:.2f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    models = {"affine (4x4)": affine().built(), "mlp 2048-4096-4": mlp((2048, 4096, 4)).built()}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        alone = [check_alone(n, b, rounds, root) for n, b in models.items()]
        through = [uploads(n, b, rounds, root) for n, b in models.items()]
    lines = [
        "# Signed uploads: what the check costs",
        "",
        f"`python benchmarks/bench_signing.py --rounds {rounds}` (medians; key signatures).",
        "",
        "The check alone, against one sha256 pass over the same bytes:",
        "",
        "| model | files | sha256 once | verify | ratio |",
        "|---|---|---|---|---|",
        *alone,
        "",
        "Upload to 201 in-process, unsigned against signed: a small model pays the check's",
        "fixed cost, a large one's compile dominates (a shared 2-CPU machine: figures vary run",
        "to run by about a tenth):",
        "",
        "| model | unsigned | signed | ratio |",
        "|---|---|---|---|",
        *through,
        "",
    ]
    text = "\n".join(lines)
    (ROOT / "benchmarks" / "results" / "signing.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
