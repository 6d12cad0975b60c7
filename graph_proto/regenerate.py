"""Regenerates framework_pb2.py and framework_pb2.pyi from framework.proto (run after editing it).

Usage: python -m graph_proto.regenerate [--check]

The generated module registers its messages in a private descriptor pool instead of protobuf's
default one: Paddle (a test-only dependency) registers the same fully qualified names
(`paddle.framework.proto.*`) in the default pool, and both must load in one process.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROTO = "graph_proto/framework.proto"
GENERATED = ("framework_pb2.py", "framework_pb2.pyi")
_DEFAULT_POOL = "_descriptor_pool.Default()"
_PRIVATE_POOL = "_POOL"
_POOL_DEFINITION = (
    "# graphgate: a private pool, so that Paddle's own copy of these messages can coexist.\n"
    "_POOL = _descriptor_pool.DescriptorPool()\n\n"
)


def generate(out_dir: Path) -> None:
    """Runs protoc (from grpcio-tools) with the mypy-protobuf plugin into out_dir."""
    root = PACKAGE_DIR.parent
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{root}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        PROTO,
    ]
    plugin = shutil.which("protoc-gen-mypy", path=str(Path(sys.executable).parent))
    if plugin is not None:
        command.insert(3, f"--plugin=protoc-gen-mypy={plugin}")
    subprocess.run(command, check=True, cwd=root)
    module = out_dir / "graph_proto" / "framework_pb2.py"
    text = module.read_text()
    if text.count(_DEFAULT_POOL) != 1:
        raise RuntimeError("unexpected protoc output: the default pool is not used exactly once")
    marker = "_sym_db = _symbol_database.Default()\n"
    text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL).replace(marker, marker + _POOL_DEFINITION)
    module.write_text(text)


def sync_generated(
    fresh_dir: Path, package_dir: Path, names: Iterable[str], check: bool
) -> list[str]:
    """The names whose committed file in `package_dir` differs from the one just generated in
    `fresh_dir`; unless `check`, each of them is rewritten. Shared with server/grpc/regenerate.py."""
    drifted = []
    for name in names:
        fresh = (fresh_dir / name).read_bytes()
        target = package_dir / name
        if not target.exists() or target.read_bytes() != fresh:
            drifted.append(name)
            if not check:
                target.write_bytes(fresh)
    return drifted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files drift")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)
        generate(out_dir)
        drifted = sync_generated(out_dir / "graph_proto", PACKAGE_DIR, GENERATED, args.check)
    if args.check and drifted:
        sys.stderr.write(f"generated files drift from {PROTO}: {drifted}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
