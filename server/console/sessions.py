"""Console sessions: an operator's key exchanged for a session cookie, checked on every page.

Framework-free. Only the sha256 of a session id is stored, so the table leaks nothing usable;
a session ends at logout, after `idle_s` without a request, `max_s` after login, or as soon as
the operator's key is revoked. The CSRF token of a session is derived from its id (an HMAC),
so it needs no storage and cannot be computed without the cookie. Failed logins are counted
per client address in memory and refused past `attempts_per_minute`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import ApiKey, ConsoleSession, utcnow
from server.errors import Forbidden, TooManyRequests
from server.services.admins import AdminService
from server.services.types import Principal

LAST_SEEN_GRANULARITY: Final = timedelta(seconds=15)  # fewer writes: one per 15 s of activity


class CsrfFailed(Forbidden):
    """A console form posted without its session's CSRF token, or with a wrong one."""

    code = "CSRF_FAILED"


class LoginThrottled(TooManyRequests):
    """Too many failed console logins from one client address within a minute."""

    code = "LOGIN_RATE_LIMITED"
    reason = "login"


@dataclass(frozen=True, slots=True)
class SessionInfo:
    principal: Principal
    created: datetime
    csrf: str


class ConsoleSessions:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        admins: AdminService,
        *,
        idle_s: float,
        max_s: float,
        attempts_per_minute: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self._admins = admins
        self._idle = timedelta(seconds=idle_s)
        self._max = timedelta(seconds=max_s)
        self._failures = FailedLogins(attempts_per_minute, clock)

    def login(
        self, key: str, request_id: str | None, client: str | None
    ) -> tuple[str, SessionInfo]:
        """A new session for an operator's key: (the cookie value, shown once, and its info).
        Unauthorized for any other key (tenant keys included); audited either way."""
        where = client or "unknown"
        self._failures.check(where)
        try:
            principal = self._admins.login(key.strip(), request_id, client)
        except Exception:
            self._failures.add(where)
            raise
        session_id = secrets.token_urlsafe(32)
        with self._sessions.begin() as s:
            row = ConsoleSession(
                id_hash=_digest(session_id),
                operator=principal.operator,
                key_id=principal.key_id,
                read_only=principal.read_only,
            )
            s.add(row)
            s.flush()
            created = row.created
        return session_id, SessionInfo(principal, created, csrf_token(session_id))

    def current(self, session_id: str) -> SessionInfo | None:
        """The live session behind a cookie, or None (unknown, ended, expired, key revoked)."""
        if not session_id or len(session_id) > 128:
            return None
        now = utcnow()
        with self._sessions.begin() as s:
            row = s.get(ConsoleSession, _digest(session_id))
            if row is None or row.ended is not None:
                return None
            if now - row.last_seen > self._idle or now - row.created > self._max:
                row.ended = now
                return None
            key = s.get(ApiKey, row.key_id)
            if key is None or key.revoked is not None:
                row.ended = now
                return None
            if now - row.last_seen > LAST_SEEN_GRANULARITY:
                row.last_seen = now
            principal = Principal("", row.key_id, True, row.operator, row.read_only)
            return SessionInfo(principal, row.created, csrf_token(session_id))

    def logout(self, session_id: str) -> None:
        with self._sessions.begin() as s:
            row = s.get(ConsoleSession, _digest(session_id))
            if row is not None and row.ended is None:
                row.ended = utcnow()

    def end_all_of(self, operator: str) -> int:
        """Ends every live session of an operator (revocation from the server side)."""
        with self._sessions.begin() as s:
            rows = s.scalars(
                select(ConsoleSession).where(
                    ConsoleSession.operator == operator, ConsoleSession.ended.is_(None)
                )
            ).all()
            for row in rows:
                row.ended = utcnow()
            return len(rows)


class FailedLogins:
    """Failed logins per client address in the last minute (a sliding window in memory)."""

    def __init__(self, per_minute: int, clock: Callable[[], float]) -> None:
        self._per_minute = per_minute
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        with self._lock:
            recent = self._recent(client)
            if self._per_minute and len(recent) >= self._per_minute:
                wait = max(1, int(60 - (self._clock() - recent[0])) + 1)
                raise LoginThrottled(
                    f"expected at most {self._per_minute} failed logins a minute from "
                    f"{client}, got {len(recent) + 1}",
                    wait,
                )

    def add(self, client: str) -> None:
        with self._lock:
            if len(self._seen) > 10_000:  # many addresses: start over rather than grow
                self._seen.clear()
            self._recent(client).append(self._clock())

    def _recent(self, client: str) -> deque[float]:
        recent = self._seen.setdefault(client, deque())
        while recent and self._clock() - recent[0] > 60:
            recent.popleft()
        return recent


def csrf_token(session_id: str) -> str:
    return hmac.new(session_id.encode(), b"graphgate-console-csrf", hashlib.sha256).hexdigest()


def csrf_ok(session_id: str, presented: str) -> bool:
    return bool(presented) and hmac.compare_digest(csrf_token(session_id), presented)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
