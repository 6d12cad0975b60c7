"""Tenants and their API keys: creation, listing, revocation and authentication."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from server.db.engine import retry_on_conflict
from server.db.models import ApiKey, Tenant, utcnow
from server.errors import Conflict, NotFound, Unauthorized
from server.services.types import IssuedKey, KeyInfo, Principal, TenantInfo, check_name

KEY_PREFIX: Final = "gg_"
VIEWER: Final = "viewer"
OPERATOR_ROLES: Final = frozenset({"admin", VIEWER})  # api_keys.role of an operator's key
ENV_ADMIN_KEY_ID: Final = "env-admin"  # the key row that GRAPHGATE_ADMIN_TOKEN maps to
_KEY_ID: Final = re.compile(r"[0-9a-f]{16}")
# Past this many cached keys the cache starts over: only keys that authenticated are cached,
# so it only fills up when that many keys are in use within one TTL.
_MAX_CACHED_KEYS: Final = 10_000


def _digest(secret: str) -> str:
    # NOTE: the secrets carry 256 random bits, so a plain sha256 cannot be brute-forced.
    return hashlib.sha256(secret.encode()).hexdigest()


class TenantService:
    """Keys look like `gg_<key_id>_<secret>`; only the secret's sha256 is stored.

    Keys that authenticated are cached in memory (sha256 of the presented key -> Principal), so
    the hot path makes no database read. Every key or tenant write of this service empties the
    cache before it returns: a revoked key is refused by the very next request in this process.
    Other replicas hear of a write through `publish` (server/services/invalidation.py, with
    Redis), which ends in their `drop_cached`; without it another process's write is seen when
    an entry expires, `cache_ttl_s` after it was cached. `cache_ttl_s` 0 turns the cache off.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        cache_ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        publish: Callable[[dict[str, str]], None] | None = None,
    ) -> None:
        self._sessions = sessions
        self._publish = publish
        self._cache_ttl_s = cache_ttl_s
        self._clock = clock
        self._principals: dict[str, tuple[Principal, float]] = {}  # digest -> (caller, expiry)
        # Bumped by every write: a lookup that read the database before a write never caches.
        self._generation = 0
        self._cache_lock = threading.Lock()

    def ensure_admin(self, token: str | None) -> str | None:
        """Start-up: installs `token` as the admin key, or makes one on first start and returns it."""
        try:
            return retry_on_conflict(lambda: self._ensure_admin(token))
        finally:
            self._invalidate()

    def _ensure_admin(self, token: str | None) -> str | None:
        with self._sessions.begin() as s:
            if token is not None:
                s.merge(ApiKey(key_id=ENV_ADMIN_KEY_ID, role="admin", hash=_digest(token)))
                return None
            active = select(ApiKey).where(ApiKey.role == "admin", ApiKey.revoked.is_(None))
            if s.scalars(active).first() is not None:
                return None
            return self._new_key(s, None, "admin")

    def create_tenant(self, name: str) -> IssuedKey:
        """A tenant and its first key; the key is in the answer and never again."""
        with self._sessions.begin() as s:
            issued = self.add_tenant(s, name)
        self._invalidate()
        return issued

    def add_tenant(self, s: Session, name: str) -> IssuedKey:
        """`create_tenant` in the caller's transaction (call `forget_cached_keys` after it)."""
        check_name("tenant", name)
        if s.scalars(select(Tenant).where(Tenant.name == name)).first() is not None:
            raise Conflict(f"tenant {name!r} already exists")
        tenant = Tenant(id=uuid.uuid4().hex, name=name)
        s.add(tenant)
        s.flush()
        return _issued(name, self._new_key(s, tenant.id, "tenant"))

    def create_key(self, name: str) -> IssuedKey:
        """An additional key for a tenant (rotation: both work until one is revoked)."""
        with self._sessions.begin() as s:
            issued = self.add_key(s, name)
        self._invalidate()
        return issued

    def add_key(self, s: Session, name: str) -> IssuedKey:
        """`create_key` in the caller's transaction (call `forget_cached_keys` after it)."""
        tenant = s.scalars(select(Tenant).where(Tenant.name == name)).first()
        if tenant is None:
            raise NotFound(f"no tenant {name!r}")
        return _issued(name, self._new_key(s, tenant.id, "tenant"))

    def issue_operator_key(self, s: Session, operator: str, role: str) -> str:
        """A key for a named operator (server/services/admins.py), in that caller's transaction."""
        key = self._new_key(s, None, role)
        s.flush()
        s.get_one(ApiKey, key.split("_")[1]).admin = operator
        return key

    def forget_cached_keys(self) -> None:
        """After an operator-key write committed elsewhere: forget every cached key."""
        self._invalidate()

    def list_tenants(self) -> list[TenantInfo]:
        with self._sessions() as s:
            keys = s.scalars(select(ApiKey).order_by(ApiKey.created)).all()
            return [
                TenantInfo(
                    t.name, t.created, tuple(_key_info(k) for k in keys if k.tenant_id == t.id)
                )
                for t in s.scalars(select(Tenant).order_by(Tenant.name))
            ]

    def revoke_key(self, key_id: str) -> KeyInfo:
        """Revokes a key; it is refused from the next request on (the cache is emptied after
        the commit, before this returns)."""
        with self._sessions.begin() as s:
            answer = self.revoke_key_in(s, key_id)
        self._invalidate()
        return answer

    def revoke_key_in(self, s: Session, key_id: str, tenant: str | None = None) -> KeyInfo:
        """`revoke_key` in the caller's transaction; with `tenant`, only a key of that tenant
        (another's is NotFound, like a missing one)."""
        key = (
            s.get(ApiKey, key_id)
            if _KEY_ID.fullmatch(key_id) or key_id == ENV_ADMIN_KEY_ID
            else None
        )
        if key is not None and tenant is not None:
            owner = s.scalars(select(Tenant).where(Tenant.name == tenant)).first()
            key = key if owner is not None and key.tenant_id == owner.id else None
        if key is None:
            raise NotFound(f"no key {key_id[:40]!r}" + (f" of tenant {tenant!r}" if tenant else ""))
        if key.revoked is None:
            key.revoked = utcnow()
        return _key_info(key)

    def cached_principal(self, presented: str) -> Principal | None:
        """The caller behind a key from the cache alone (no database, no blocking); None when
        the key is not cached (unknown, wrong, revoked, expired or not seen yet)."""
        if self._cache_ttl_s <= 0:
            return None
        with self._cache_lock:
            entry = self._principals.get(_digest(presented))
        if entry is None or entry[1] <= self._clock():
            return None
        return entry[0]

    def authenticate(self, presented: str) -> Principal:
        """The caller behind a key; Unauthorized for unknown, wrong or revoked keys alike."""
        if (cached := self.cached_principal(presented)) is not None:
            return cached
        with self._cache_lock:
            generation = self._generation
        key_id, secret = _split(presented)
        with self._sessions() as s:
            key = s.get(ApiKey, key_id)
            ok = key is not None and hmac.compare_digest(key.hash, _digest(secret))
            if key is None or not ok or key.revoked is not None:
                raise Unauthorized("invalid or revoked API key")
            principal = Principal(
                tenant_id=key.tenant_id or "",
                key_id=key_id,
                is_admin=key.role in OPERATOR_ROLES,
                operator=key.admin or ("root" if key.role in OPERATOR_ROLES else ""),
                read_only=key.role == VIEWER,
            )
        self._cache(presented, principal, generation)
        return principal

    def _cache(self, presented: str, principal: Principal, generation: int) -> None:
        """Caches a key that authenticated, unless a write came after the database read."""
        if self._cache_ttl_s <= 0:
            return
        expiry = self._clock() + self._cache_ttl_s
        with self._cache_lock:
            if generation != self._generation:
                return
            if len(self._principals) >= _MAX_CACHED_KEYS:
                self._principals.clear()
            self._principals[_digest(presented)] = (principal, expiry)

    def _invalidate(self) -> None:
        """After a committed key or tenant write: forget every cached key, here and (when
        there is a bus) in every other replica."""
        self.drop_cached()
        if self._publish is not None:
            self._publish({"kind": "keys"})

    def drop_cached(self) -> None:
        """Forgets every cached key (this process only)."""
        with self._cache_lock:
            self._generation += 1
            self._principals.clear()

    def _new_key(self, s: Session, tenant_id: str | None, role: str) -> str:
        key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        s.add(ApiKey(key_id=key_id, tenant_id=tenant_id, role=role, hash=_digest(secret)))
        return f"{KEY_PREFIX}{key_id}_{secret}"


def _split(presented: str) -> tuple[str, str]:
    """(key_id, secret) of a `gg_` key; any other token is checked against the env admin key."""
    if presented.startswith(KEY_PREFIX):
        key_id, _, secret = presented[len(KEY_PREFIX) :].partition("_")
        if _KEY_ID.fullmatch(key_id) and secret:
            return key_id, secret
    return ENV_ADMIN_KEY_ID, presented


def _issued(tenant: str, key: str) -> IssuedKey:
    return IssuedKey(tenant, key.split("_")[1], key)


def _key_info(key: ApiKey) -> KeyInfo:
    return KeyInfo(key.key_id, key.role, key.created, key.revoked)


def announce_admin_token(token: str) -> None:
    """Shows a generated admin token once, on stderr; only its hash is stored."""
    sys.stderr.write(f"graphgate: created the admin token (shown once, store it now):\n  {token}\n")
    sys.stderr.flush()
