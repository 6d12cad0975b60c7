"""Regenerates the Python code of the gRPC protos here (run after editing one of them).

Usage: python -m server.grpc.regenerate [--check]

As graph_proto/regenerate.py does for framework.proto: protoc from grpcio-tools with the
mypy-protobuf plugin, and each generated module registers its messages in a private descriptor
pool instead of protobuf's default one. tritonclient.grpc registers the same fully qualified
names (`inference.*`) in the default pool, and grpcio-health-checking `grpc.health.v1.*`: a
client and graphgate must load in one process (the tests do). No service stubs are generated:
server/grpc/service.py declares its handlers itself, reading raw bytes (server/grpc/errors.py
says why).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

from graph_proto.regenerate import sync_generated

PACKAGE_DIR: Final = Path(__file__).resolve().parent
ROOT: Final = PACKAGE_DIR.parents[1]
PROTOS: Final = ("server/grpc/grpc_predict_v2.proto", "server/grpc/health.proto")
_DEFAULT_POOL: Final = "_descriptor_pool.Default()"
_PRIVATE_POOL: Final = "_POOL"
_POOL_DEFINITION: Final = (
    "# graphgate: a private pool, so that a client's own copy of these messages can coexist.\n"
    "_POOL = _descriptor_pool.DescriptorPool()\n\n"
)


def generated_names() -> list[str]:
    """The files generated from PROTOS, as named in this package."""
    stems = [Path(proto).stem for proto in PROTOS]
    return [f"{stem}_pb2{suffix}" for stem in stems for suffix in (".py", ".pyi")]


def generate(out_dir: Path) -> None:
    """Runs protoc (from grpcio-tools) with the mypy-protobuf plugin into out_dir."""
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        *PROTOS,
    ]
    plugin = shutil.which("protoc-gen-mypy", path=str(Path(sys.executable).parent))
    if plugin is not None:
        command.insert(3, f"--plugin=protoc-gen-mypy={plugin}")
    subprocess.run(command, check=True, cwd=ROOT)
    for proto in PROTOS:
        _use_private_pool(out_dir / Path(proto).with_name(f"{Path(proto).stem}_pb2.py"))


def _use_private_pool(module: Path) -> None:
    text = module.read_text()
    if text.count(_DEFAULT_POOL) != 1:
        raise RuntimeError(
            f"unexpected protoc output in {module.name}: the default pool is not used exactly once"
        )
    marker = "_sym_db = _symbol_database.Default()\n"
    text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL).replace(marker, marker + _POOL_DEFINITION)
    module.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files drift")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)
        generate(out_dir)
        fresh_dir = out_dir / "server" / "grpc"
        drifted = sync_generated(fresh_dir, PACKAGE_DIR, generated_names(), args.check)
    if args.check and drifted:
        sys.stderr.write(f"generated files drift from {list(PROTOS)}: {drifted}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
