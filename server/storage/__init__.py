"""Durable bytes: content-addressed artifact files (no knowledge of models or tenants).

Two stores with one interface (`ArtifactStore`): a folder in the data directory
(`artifacts.Artifacts`, the default) or an S3-compatible bucket (`s3.S3Artifacts`), chosen by
`open_artifacts`. Both make `put` durable before it returns, so a version row written after it
never points at missing bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol


class StorageUnavailable(Exception):
    """The artifact store did not answer or failed; nothing was stored, retry later."""

    code = "STORAGE_UNAVAILABLE"


class ArtifactStore(Protocol):
    def put(self, data: bytes, sha: str | None = None) -> str:
        """Stores `data` durably and returns its sha256 (`sha` when the caller computed it
        from these bytes already: an upload hashes its bytes once)."""
        ...

    def put_file(self, path: Path, sha: str) -> str:
        """Stores the file at `path`, whose sha256 the caller computed as it wrote it (a spool
        file: server/storage/spool.py), without reading it into memory; returns `sha`."""
        ...

    def get(self, sha: str) -> bytes:
        """The bytes stored under `sha`, verified; ArtifactMissing when absent or corrupt."""
        ...

    def delete(self, sha: str) -> None:
        """Removes the artifact; absent already is fine."""
        ...

    def list(self) -> Iterator[str]:
        """The sha256 of every stored artifact."""
        ...

    def list_aged(self) -> Iterator[tuple[str, float]]:
        """(sha256, seconds since it was last stored) of every stored artifact."""
        ...

    def size(self, sha: str) -> int:
        """Bytes stored under `sha`; ArtifactMissing when absent."""
        ...

    def sweep(self) -> int:
        """Removes what an interrupted write left behind; returns how many. Start-up only."""
        ...


def open_artifacts(url: str | None, data_dir: Path) -> ArtifactStore:
    """The store `url` names (`s3://bucket/prefix`), else the folder `data_dir/artifacts`."""
    if url is None:
        from server.storage.artifacts import Artifacts

        return Artifacts(data_dir / "artifacts")
    from server.storage.s3 import S3Artifacts  # boto3 is imported only when S3 is used

    return S3Artifacts.from_url(url)
