"""Console sessions: an operator's key exchanged for a session cookie, checked on every page.

Framework-free. Only the sha256 of a session id is stored, so the table leaks nothing usable;
a session ends at logout, after `idle_s` without a request, `max_s` after login, or as soon as
the operator's key is revoked. The CSRF token of a session is derived from its id (an HMAC),
so it needs no storage and cannot be computed without the cookie. Login attempts are counted
per client address and per key id in memory (each replica its own), before the key is
checked, and refused past `attempts_per_minute` failures; a success is not counted.
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
        # Counted before the key is checked, per client address and per key id: concurrent
        # attempts each take a slot first, so no burst gets past the limit; a success gives
        # its slots back.
        counted = [f"client:{client or 'unknown'}"]
        if key_id := _key_id(key):  # a known key's id: guessing its secret from many clients
            counted.append(f"key:{key_id}")
        slots = self._failures.take(tuple(counted))
        principal = self._admins.login(key.strip(), request_id, client)
        self._failures.give_back(slots)
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
    """Login attempts per counted name (a client address, a key id) in the last minute, a
    sliding window in memory; a successful login gives its attempts back."""

    def __init__(self, per_minute: int, clock: Callable[[], float]) -> None:
        self._per_minute = per_minute
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def take(self, names: tuple[str, ...]) -> list[tuple[str, float]]:
        """Counts one attempt against each name, atomically: LoginThrottled (nothing counted)
        when any of them is at the limit already. Returns what `give_back` undoes."""
        if not self._per_minute:
            return []
        with self._lock:
            now = self._clock()
            for name in names:
                recent = self._recent(name, now)
                if len(recent) >= self._per_minute:
                    wait = max(1, int(60 - (now - recent[0])) + 1)
                    raise LoginThrottled(
                        f"expected at most {self._per_minute} failed logins a minute from one "
                        f"client or against one key, got {len(recent) + 1} ({name[:40]})",
                        wait,
                    )
            if len(self._seen) > 10_000:  # many names: start over rather than grow
                self._seen.clear()
            for name in names:
                self._recent(name, now).append(now)
            return [(name, now) for name in names]

    def give_back(self, taken: list[tuple[str, float]]) -> None:
        with self._lock:
            for name, at in taken:
                recent = self._seen.get(name)
                if recent is not None and at in recent:
                    recent.remove(at)

    def _recent(self, name: str, now: float) -> deque[float]:
        recent = self._seen.setdefault(name, deque())
        while recent and now - recent[0] > 60:
            recent.popleft()
        return recent


def _key_id(presented: str) -> str:
    """The id part of a `gg_<id>_<secret>` key (never the secret); "" for any other token
    (a shared bucket for those would let anyone lock the env admin token out)."""
    parts = presented.strip().split("_", 2)
    if len(parts) == 3 and parts[0] == "gg" and len(parts[1]) == 16 and parts[1].isalnum():
        return parts[1]
    return ""


def csrf_token(session_id: str) -> str:
    return hmac.new(session_id.encode(), b"graphgate-console-csrf", hashlib.sha256).hexdigest()


def csrf_ok(session_id: str, presented: str) -> bool:
    return bool(presented) and hmac.compare_digest(csrf_token(session_id), presented)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
