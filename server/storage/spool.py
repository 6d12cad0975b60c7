"""Spool files: an upload's parts written to disk once, hashed as they are written.

An upload's program and params never sit whole in the server's memory: each file part streams
into a spool file here (`SpoolWriter`), its sha256 computed chunk by chunk on the way, so the
bytes are read once, by the network, and the digest is carried along (`Spooled`). The worker
reads the program from the file and maps the params (no copy pickled across processes), and the
folder artifact store links the file into place rather than copying it (server/storage/
artifacts.py `put_file`). The spool folder sits beside the artifacts in the data directory, on
the same file system, so that link is possible.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_PREFIX: Final = "part-"
_READ_BYTES: Final = 1024 * 1024  # how much of a file `hashed` reads at a time


@dataclass(frozen=True, slots=True)
class Spooled:
    """A file in the spool, its size and the sha256 of its bytes as they were written. Pickled
    as these three values (a worker opens the file itself)."""

    path: Path
    size: int
    sha256: str

    def read(self) -> bytes:
        return self.path.read_bytes()

    def discard(self) -> None:
        """Removes the spool file (an artifact linked from it keeps its bytes)."""
        self.path.unlink(missing_ok=True)


class SpoolWriter:
    """One spool file being written: `write` hashes each chunk as it goes to the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("xb")
        self._sha = hashlib.sha256()
        self._size = 0

    def write(self, chunk: bytes | memoryview) -> None:
        self._sha.update(chunk)
        self._file.write(chunk)
        self._size += len(chunk)

    def finish(self) -> Spooled:
        """Closes the file (not fsynced: the artifact store makes what it keeps durable)."""
        self._file.close()
        return Spooled(self.path, self._size, self._sha.hexdigest())

    def abort(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


class Spool:
    """The spool folder (`data_dir/spool`, or a temporary one for embedded use and tests)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def writer(self) -> SpoolWriter:
        return SpoolWriter(self.new_path())

    def new_path(self) -> Path:
        """A fresh name in the spool, for a file someone else writes (a worker's ONNX)."""
        return self.folder / f"{_PREFIX}{secrets.token_hex(12)}"

    def hashed(self, path: Path) -> Spooled:
        """A file written by another process (the compile's ONNX), read once to hash it."""
        sha = hashlib.sha256()
        size = 0
        with path.open("rb") as f:
            while chunk := f.read(_READ_BYTES):
                sha.update(chunk)
                size += len(chunk)
        return Spooled(path, size, sha.hexdigest())

    def sweep(self, older_than_s: float) -> int:
        """Start-up: removes spool files an interrupted upload left behind; returns how many."""
        now = time.time()
        removed = 0
        for path in self.folder.glob(f"{_PREFIX}*"):
            try:
                if now - path.stat().st_mtime > older_than_s:
                    path.unlink()
                    removed += 1
            except OSError:
                continue  # gone meanwhile
        return removed


def temporary_spool() -> Spool:
    """A spool under the system's temporary folder, one per process (ModelService's default
    when the app gives it none)."""
    return Spool(Path(tempfile.gettempdir()) / f"graphgate-spool-{os.getpid()}")
