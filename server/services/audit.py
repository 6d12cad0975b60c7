"""The audit log: an append-only record of every state change, by tenants and operators.

Rows hold who (an operator's name, or a tenant and its key id), what, the target, the outcome,
the request id and the client address; `detail` holds codes, sha256s and changed fields. NOTE:
never key material, tensors or program bytes: callers pass names, ids and digests only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import AuditEntry
from server.errors import BadRequest

MAX_PAGE: Final = 500
OK: Final = "ok"
REJECTED: Final = "rejected"
DENIED: Final = "denied"
# What one row may quote of a caller's text: the audit log is read by people and kept for ever.
QUOTED_CHARS: Final = 200
MAX_ITEMS: Final = 50
TARGET_CHARS: Final = 200  # the column's width
MAX_ID: Final = 2**63 - 1  # the largest id a BIGINT (and SQLite's INTEGER) holds
FILTER_CHARS: Final = 80  # the widest filtered column (actor)


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
        """Appends one row in a transaction of its own; `tenant` is the tenant acted on
        (default: the acting tenant)."""
        with self._sessions.begin() as s:
            add(s, actor, action, target, outcome, tenant=tenant, detail=detail)

    def page(self, query: AuditQuery) -> AuditPage:
        check_query(query)
        with self._sessions() as s:
            rows = list(s.scalars(_select(query).limit(query.limit + 1)))
        more = len(rows) > query.limit
        entries = tuple(_record(r) for r in rows[: query.limit])
        return AuditPage(entries, entries[-1].id if more else None, query)

    def export_jsonl(self, query: AuditQuery) -> Iterator[str]:
        """Every matching row as JSON lines, newest first, page by page. The query is checked
        here, before the first line: a bad one is a 400, not a stream cut short."""
        check_query(replace(query, limit=MAX_PAGE))
        return self._lines(query)

    def _lines(self, query: AuditQuery) -> Iterator[str]:
        cursor = query.cursor
        while True:
            page = self.page(replace(query, cursor=cursor, limit=MAX_PAGE))
            for entry in page.entries:
                yield json.dumps(entry.to_json(), sort_keys=True) + "\n"
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


def check_query(query: AuditQuery) -> None:
    """Every filter within what the database can compare: "expected X, got Y" otherwise."""
    if not 1 <= query.limit <= MAX_PAGE:
        raise BadRequest(f"limit: expected 1 to {MAX_PAGE}, got {query.limit}")
    if query.cursor is not None and not 1 <= query.cursor <= MAX_ID:
        raise BadRequest(f"cursor: expected an entry id from 1 to {MAX_ID}, got {query.cursor}")
    for name in ("actor", "action", "tenant"):
        value = getattr(query, name)
        if value is not None and len(value) > FILTER_CHARS:
            raise BadRequest(
                f"{name}: expected at most {FILTER_CHARS} characters, got {len(value)}"
            )


def utc_moment(what: str, moment: datetime | None) -> datetime | None:
    """A filter time as the database holds it (naive UTC): an aware time converted, a naive
    one taken as UTC; one whose UTC falls outside years 1-9999 is a 400 naming it."""
    if moment is None or moment.tzinfo is None:
        return moment
    try:
        return moment.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        raise BadRequest(
            f"{what}: expected a time within years 1 to 9999 in UTC, got {moment.isoformat()}"
        ) from None


def add(
    s: Session,
    actor: Actor,
    action: str,
    target: str | None,
    outcome: str = OK,
    *,
    tenant: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """Appends one row in the caller's transaction: the row commits with the change it
    records, or neither does."""
    s.add(
        AuditEntry(
            actor=actor.label,
            key_id=actor.key_id,
            tenant=tenant or actor.tenant or None,
            action=action,
            target=None if target is None else target[:TARGET_CHARS],
            outcome=outcome,
            detail=json.dumps(bounded(dict(detail or {})), sort_keys=True),
            request_id=actor.request_id,
            client=None if actor.client is None else actor.client[:64],
        )
    )


def bounded(value: Any, chars: int = QUOTED_CHARS) -> Any:
    """`value` with every string in it cut to `chars` characters (lists to MAX_ITEMS items):
    audit details may quote what a caller sent."""
    if isinstance(value, str):
        return value if len(value) <= chars else value[:chars] + "…"
    if isinstance(value, Mapping):
        return {bounded(str(k), chars): bounded(v, chars) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [bounded(v, chars) for v in value[:MAX_ITEMS]]
        return items + ([f"… {len(value) - MAX_ITEMS} more"] if len(value) > MAX_ITEMS else [])
    return value


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
