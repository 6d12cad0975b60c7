"""The audit log: an append-only record of every state change, by tenants and operators.

Rows hold who (an operator's name, or a tenant and its key id), what, the target, the outcome,
the request id and the client address; `detail` holds codes, sha256s and changed fields. NOTE:
never key material, tensors or program bytes: callers pass names, ids and digests only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import AuditEntry
from server.errors import BadRequest

MAX_PAGE: Final = 500
OK: Final = "ok"
REJECTED: Final = "rejected"
DENIED: Final = "denied"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts, from the caller's key (never the body): `operator` or `tenant` is set."""

    key_id: str | None
    operator: str = ""
    tenant: str = ""
    request_id: str | None = None
    client: str | None = None

    @property
    def label(self) -> str:
        return f"admin:{self.operator}" if self.operator else f"tenant:{self.tenant}"


SYSTEM: Final = Actor(key_id=None, operator="system")


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: datetime  # naive UTC
    actor: str
    key_id: str | None
    tenant: str | None
    action: str
    target: str | None
    outcome: str
    detail: Mapping[str, Any]
    request_id: str | None
    client: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat() + "Z",
            "actor": self.actor,
            "key_id": self.key_id,
            "tenant": self.tenant,
            "action": self.action,
            "target": self.target,
            "outcome": self.outcome,
            "detail": dict(self.detail),
            "request_id": self.request_id,
            "client": self.client,
        }


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Filters (each optional) and a cursor: the id of the last row of the previous page."""

    actor: str | None = None
    action: str | None = None
    tenant: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    cursor: int | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class AuditPage:
    """Newest first; `next_cursor` None on the last page."""

    entries: tuple[AuditRecord, ...]
    next_cursor: int | None = None
    filters: AuditQuery = field(default_factory=AuditQuery)


class AuditService:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def record(
        self,
        actor: Actor,
        action: str,
        target: str | None,
        outcome: str = OK,
        *,
        tenant: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Appends one row; `tenant` is the tenant acted on (default: the acting tenant)."""
        with self._sessions.begin() as s:
            s.add(
                AuditEntry(
                    actor=actor.label,
                    key_id=actor.key_id,
                    tenant=tenant or actor.tenant or None,
                    action=action,
                    target=target,
                    outcome=outcome,
                    detail=json.dumps(dict(detail or {}), sort_keys=True),
                    request_id=actor.request_id,
                    client=actor.client,
                )
            )

    def page(self, query: AuditQuery) -> AuditPage:
        if not 1 <= query.limit <= MAX_PAGE:
            raise BadRequest(f"limit: expected 1 to {MAX_PAGE}, got {query.limit}")
        with self._sessions() as s:
            rows = list(s.scalars(_select(query).limit(query.limit + 1)))
        more = len(rows) > query.limit
        entries = tuple(_record(r) for r in rows[: query.limit])
        return AuditPage(entries, entries[-1].id if more else None, query)

    def export_jsonl(self, query: AuditQuery) -> Iterator[str]:
        """Every matching row as JSON lines, newest first, page by page."""
        cursor = query.cursor
        while True:
            page = self.page(
                AuditQuery(
                    query.actor, query.action, query.tenant, query.since, query.until, cursor
                )
            )
            for entry in page.entries:
                yield json.dumps(entry.to_json(), sort_keys=True) + "\n"
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


def _select(query: AuditQuery) -> Any:
    statement = select(AuditEntry).order_by(AuditEntry.id.desc())
    if query.actor is not None:
        statement = statement.where(AuditEntry.actor == query.actor)
    if query.action is not None:
        statement = statement.where(AuditEntry.action == query.action)
    if query.tenant is not None:
        statement = statement.where(AuditEntry.tenant == query.tenant)
    if query.since is not None:
        statement = statement.where(AuditEntry.at >= query.since)
    if query.until is not None:
        statement = statement.where(AuditEntry.at < query.until)
    if query.cursor is not None:
        statement = statement.where(AuditEntry.id < query.cursor)
    return statement


def _record(row: AuditEntry) -> AuditRecord:
    return AuditRecord(
        id=row.id,
        at=row.at,
        actor=row.actor,
        key_id=row.key_id,
        tenant=row.tenant,
        action=row.action,
        target=row.target,
        outcome=row.outcome,
        detail=json.loads(row.detail),
        request_id=row.request_id,
        client=row.client,
    )
