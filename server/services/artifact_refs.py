"""Artifact bookkeeping: reference counts in the database, per-tenant storage quotas, and the
garbage collection of artifacts no version names any more (the store itself knows bytes only).

Crash safety, in the order things happen:
- upload: the files are written first, then (one transaction) the version row and the counts;
  a crash in between leaves files no row names: `sweep` removes them at the next start.
- delete: (one transaction) the version row goes and the counts drop, rows reaching 0 with
  them; then the files. A crash in between leaves files no row names: `sweep` again.
- an upload racing a delete of the same bytes: `collect` checks, under `_lock`, that no row
  names a file before deleting it, and an upload re-stores its files under the same lock once
  its rows are committed (`keep_stored`), so a committed row never names a deleted file.
NOTE: `_lock` is per process; replicas sharing one store (PostgreSQL and S3) need the same
check under a database lock, which this does not take yet.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from sqlalchemy import func, select, union
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import ArtifactRef, Model, ModelVersion, Tenant
from server.services.limits import StorageQuotaExceeded
from server.storage import ArtifactStore
from server.storage.artifacts import ArtifactMissing

T = TypeVar("T")


class ArtifactRefs:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        artifacts: ArtifactStore,
        quota_of: Callable[[str], int] = lambda _tenant: 0,
    ) -> None:
        self._sessions = sessions
        self._artifacts = artifacts
        # The tenant's quota `max_storage_bytes` (server/services/policies.py); 0: none.
        self._quota_of = quota_of
        self._lock = threading.Lock()

    # -- upload ----------------------------------------------------------------------------

    def retain(
        self, s: Session, tenant: str, sizes: Mapping[str, int], quota: int | None = None
    ) -> None:
        """In the transaction that adds a version naming `sizes`' artifacts (sha -> bytes):
        raises StorageQuotaExceeded past the tenant's quota (artifacts it stores already count
        once), else counts one more reference to each. `quota`: the tenant's, as the caller
        read it in this transaction (default: `quota_of`'s)."""
        if quota := self._quota_of(tenant) if quota is None else quota:
            self._check_quota(s, tenant, sizes, quota)
        for sha, size in sorted(sizes.items()):  # locked in sha order, like `release`
            row = s.get(ArtifactRef, sha, with_for_update=True)  # another replica's count
            if row is None:
                s.add(ArtifactRef(sha256=sha, size_bytes=size, refs=1))
            else:
                row.refs += 1
                row.size_bytes = size or row.size_bytes

    def keep_stored(self, blobs: Iterable[tuple[str, T]], put: Callable[[str, T], None]) -> None:
        """After the version row is committed: stores again, with `put(sha, blob)`, any of
        `blobs` that a concurrent `collect` deleted in between (a stat each otherwise)."""
        with self._lock:
            for sha, blob in blobs:
                put(sha, blob)

    # -- delete ----------------------------------------------------------------------------

    def release(self, s: Session, versions: Iterable[ModelVersion]) -> list[str]:
        """In the transaction that deletes `versions`: drops their counts; returns the shas
        that reached 0 (their rows are deleted here), for `collect` once committed."""
        freed = []
        for sha in sorted(sha for v in versions for sha in _named(v)):
            row = s.get(ArtifactRef, sha, with_for_update=True)
            if row is None:
                continue
            row.refs -= 1
            if row.refs <= 0:
                s.delete(row)
                freed.append(sha)
        return freed

    def collect(self, shas: Sequence[str]) -> int:
        """Deletes the files of `shas` that no row names (a concurrent upload may have named
        one again); returns how many."""
        deleted = 0
        with self._lock, self._sessions() as s:
            for sha in shas:
                if s.get(ArtifactRef, sha) is None:
                    self._artifacts.delete(sha)
                    deleted += 1
        return deleted

    # -- start-up --------------------------------------------------------------------------

    def sweep(self, grace_s: float) -> int:
        """Start-up only: deletes stored artifacts no row names (a crashed upload's or delete's)
        and last stored more than `grace_s` ago, and fills in the sizes rows do not know yet
        (rows counted by the migration).

        The grace period is what makes this safe with replicas: another replica's upload in
        flight has stored its artifacts but not yet committed the row naming them; they are
        younger than the grace period (every store restarts an artifact's age) and stay.
        """
        # Listed before the rows are read: an artifact an upload commits in between is named.
        aged = [sha for sha, age_s in self._artifacts.list_aged() if age_s > grace_s]
        with self._sessions() as s:
            known = set(s.scalars(select(ArtifactRef.sha256)))
        orphans = [sha for sha in aged if sha not in known]
        removed = self.collect(orphans)
        with self._sessions.begin() as s:
            for row in s.scalars(select(ArtifactRef).where(ArtifactRef.size_bytes == 0)):
                # A version naming a missing artifact answers that when it is loaded.
                with contextlib.suppress(ArtifactMissing):
                    row.size_bytes = self._artifacts.size(row.sha256)
        return removed

    # -- helpers ---------------------------------------------------------------------------

    def usage(self, s: Session, tenant: str) -> int:
        """Bytes of the distinct artifacts the tenant's versions name."""
        total = select(func.coalesce(func.sum(ArtifactRef.size_bytes), 0)).where(
            ArtifactRef.sha256.in_(_tenant_shas(tenant))
        )
        return int(s.scalar(total) or 0)

    def _check_quota(self, s: Session, tenant: str, sizes: Mapping[str, int], quota: int) -> None:
        stored = set(s.scalars(_tenant_shas(tenant)))
        used = self.usage(s, tenant)
        new = sum(size for sha, size in sizes.items() if sha not in stored)
        if used + new > quota:
            row = s.get(Tenant, tenant)
            raise StorageQuotaExceeded(
                f"quota max_storage_bytes: expected at most {quota} stored bytes for tenant "
                f"{row.name if row else tenant}, got {used + new} with this upload "
                f"({used} stored, {new} new)"
            )


def _named(version: ModelVersion) -> list[str]:
    """The distinct artifacts a version names (`retain` counts each once per version)."""
    shas = (version.program_sha256, version.params_sha256, version.onnx_sha256)
    return list(dict.fromkeys(sha for sha in shas if sha is not None))


def _tenant_shas(tenant: str):  # type: ignore[no-untyped-def]
    versions = select(ModelVersion).join(Model).where(Model.tenant_id == tenant).subquery()
    return union(
        select(versions.c.program_sha256),
        select(versions.c.params_sha256).where(versions.c.params_sha256.is_not(None)),
        select(versions.c.onnx_sha256),
    )
