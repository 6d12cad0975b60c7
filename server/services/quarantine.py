"""The worker pool's quarantine kept in the database: crashes are counted across replicas, and
a quarantined version (model_versions.status "quarantined") stays so across restarts until an
operator releases it (server/services/operators.py).

The pool asks `holds` before every run: a set read. The set is read again from the database
at start, after every quarantine this process makes, and on every model event of the
invalidation bus (another replica's quarantine or release drops that model's lookups too, so
its next request reads the status and is refused there)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import Model, ModelCrash, ModelVersion, utcnow
from server.dispatch import ModelLabel
from server.services.models import QUARANTINED, READY


class DbQuarantine:
    """What server/dispatch's Quarantine answers (crashed, holds, held), from the database."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        crashes: int,
        window_s: float,
        on_quarantine: Callable[[str, str], None] = lambda _tenant, _name: None,
    ) -> None:
        self._sessions = sessions
        self._crashes = crashes
        self._window = timedelta(seconds=window_s)
        self._on_quarantine = on_quarantine  # (tenant id, model): drop its lookups everywhere
        self._held: frozenset[ModelLabel] = frozenset()
        self._lock = threading.Lock()
        self.reload()

    def crashed(self, label: ModelLabel) -> bool:
        """Records a crash of `label`'s version; True when it quarantines the version."""
        tenant_id, name, version = label
        now = utcnow()
        where = (
            ModelCrash.tenant_id == tenant_id,
            ModelCrash.model == name,
            ModelCrash.version == version,
        )
        with self._sessions.begin() as s:
            s.execute(delete(ModelCrash).where(*where, ModelCrash.at < now - self._window))
            s.add(ModelCrash(tenant_id=tenant_id, model=name, version=version, at=now))
            s.flush()
            recent = s.scalar(select(func.count()).select_from(ModelCrash).where(*where)) or 0
            row = _version_row(s, label) if recent >= self._crashes else None
            quarantined = row is not None and row.status == READY
            if row is not None and quarantined:
                row.status = QUARANTINED
        if quarantined:
            self.reload()
            self._on_quarantine(tenant_id, name)
        return quarantined

    def holds(self, label: ModelLabel) -> bool:
        return label in self._held

    def held(self) -> list[ModelLabel]:
        return sorted(self._held)

    def reload(self) -> None:
        """Reads the quarantined versions again (start, a quarantine, a bus message)."""
        with self._lock, self._sessions() as s:
            rows = s.execute(
                select(Model.tenant_id, Model.name, ModelVersion.version)
                .join(ModelVersion)
                .where(ModelVersion.status == QUARANTINED)
            ).all()
            self._held = frozenset((t, n, v) for t, n, v in rows)


def _version_row(s: Session, label: ModelLabel) -> ModelVersion | None:
    tenant_id, name, version = label
    return s.scalars(
        select(ModelVersion)
        .join(Model)
        .where(Model.tenant_id == tenant_id, Model.name == name)
        .where(ModelVersion.version == version)
        .with_for_update()
    ).first()
