"""Content-addressed artifact files: put(bytes) -> sha256, put_file(path, sha256) (a spool file
linked into place), get(sha256) -> bytes, atomically;
delete(sha256), list() and size(sha256) for the garbage collector (which decides what to delete:
this layer knows bytes only)."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

TMP_PREFIX: Final = ".tmp-"
SHA256: Final = re.compile(r"[0-9a-f]{64}")  # an artifact's name, matched whole


class ArtifactMissing(Exception):
    """A stored artifact is absent or its bytes no longer match its sha256."""


class Artifacts:
    """Files named by the sha256 of their bytes under `root/ab/abcdef...`; written tmp-fsync-rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def put(self, data: bytes, sha: str | None = None) -> str:
        """Stores `data` durably (file and directory entry fsynced) and returns its sha256
        (`sha`, when given, is the caller's own hash of these bytes)."""
        sha = sha or hashlib.sha256(data).hexdigest()
        if (final := self._new_place(sha)) is not None:
            tmp = final.parent / f"{TMP_PREFIX}{secrets.token_hex(8)}"
            try:
                with tmp.open("xb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, final)
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_dir(final.parent)
        return sha

    def put_file(self, path: Path, sha: str) -> str:
        """Stores the file at `path` (its bytes hash to `sha`: the caller hashed them as it
        wrote them) durably, as a hard link when it is on this file system (no byte is copied;
        the caller never writes to it again), else as a kernel-side copy."""
        if (final := self._new_place(sha)) is not None:
            tmp = final.parent / f"{TMP_PREFIX}{secrets.token_hex(8)}"
            try:
                _link_or_copy(path, tmp)
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, final)
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_dir(final.parent)
        return sha

    def _new_place(self, sha: str) -> Path | None:
        """The path to write `sha` to, or None when it is stored already."""
        final = self._path(sha)
        if final.is_file():
            # Stored again: its age restarts, as garbage collection's grace period counts from
            # the last store (a replica's start-up sweep never deletes what was just uploaded).
            os.utime(final)
            return None
        final.parent.mkdir(exist_ok=True)
        return final

    def get(self, sha: str) -> bytes:
        """The bytes stored under `sha`, verified against it."""
        try:
            data = self._path(sha).read_bytes()
        except OSError:
            raise ArtifactMissing(f"artifact {sha} is missing") from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise ArtifactMissing(f"artifact {sha} is corrupt: its bytes hash differently")
        return data

    def delete(self, sha: str) -> None:
        """Removes the artifact `sha`, durably; absent already is fine (deletes are retried)."""
        path = self._path(sha)
        path.unlink(missing_ok=True)
        if path.parent.is_dir():
            _fsync_dir(path.parent)

    def list(self) -> Iterator[str]:
        """The sha256 of every stored artifact (temporary files are not artifacts)."""
        for path in self.root.glob("*/*"):
            if SHA256.fullmatch(path.name) and path.parent.name == path.name[:2]:
                yield path.name

    def list_aged(self) -> Iterator[tuple[str, float]]:
        """(sha256, seconds since its file was last written or stored again) of every artifact."""
        now = time.time()
        for sha in self.list():
            try:
                yield sha, now - self._path(sha).stat().st_mtime
            except OSError:
                continue  # deleted since it was listed

    def size(self, sha: str) -> int:
        """Bytes stored under `sha` (not verified), ArtifactMissing when absent."""
        try:
            return self._path(sha).stat().st_size
        except OSError:
            raise ArtifactMissing(f"artifact {sha} is missing") from None

    def sweep(self) -> int:
        """Deletes temporary files a crashed write left behind; returns how many. Start-up only."""
        leftovers = list(self.root.glob(f"*/{TMP_PREFIX}*"))
        for path in leftovers:
            path.unlink(missing_ok=True)
        return len(leftovers)

    def _path(self, sha: str) -> Path:
        # NOTE: names are only ever our own hex digests, never a client string.
        if not SHA256.fullmatch(sha):
            raise ArtifactMissing(f"not a sha256: {sha!r}")
        return self.root / sha[:2] / sha


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed there
        shutil.copyfile(source, target)  # copy_file_range/sendfile: not through this process


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
