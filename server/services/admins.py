"""Named operators: admins (change anything) and viewers (read everything), and their login.

An operator's key is an `api_keys` row with role "admin" or "viewer" and the operator's name,
so it authenticates like any key (hashed at rest, cached, revoked at once). The first-start or
`GRAPHGATE_ADMIN_TOKEN` key is the operator `root`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from server.db.engine import retry_on_conflict
from server.db.models import Admin, ApiKey, utcnow
from server.errors import Conflict, InvalidName, NotFound, Unauthorized
from server.services.audit import DENIED, Actor, AuditService
from server.services.tenants import OPERATOR_ROLES, TenantService
from server.services.types import Principal, check_name

ROOT: Final = "root"
ROLES: Final = tuple(sorted(OPERATOR_ROLES))


@dataclass(frozen=True, slots=True)
class IssuedAdminKey:
    """A new operator and its key: `key` is shown in this answer and never again."""

    name: str
    role: str
    key_id: str
    key: str


@dataclass(frozen=True, slots=True)
class AdminInfo:
    name: str
    role: str
    created: datetime | None
    revoked: datetime | None
    key_ids: tuple[str, ...]


class AdminService:
    def __init__(
        self, sessions: sessionmaker[Session], tenants: TenantService, audit: AuditService
    ) -> None:
        self._sessions = sessions
        self._tenants = tenants
        self._audit = audit

    def ensure_root(self) -> None:
        """Start-up: the operator `root` exists and owns every admin key that has no operator."""
        retry_on_conflict(self._ensure_root)
        self._tenants.forget_cached_keys()

    def _ensure_root(self) -> None:
        with self._sessions.begin() as s:
            if s.get(Admin, ROOT) is None:
                s.add(Admin(name=ROOT, role="admin"))
            unnamed = select(ApiKey).where(ApiKey.role == "admin", ApiKey.admin.is_(None))
            for key in s.scalars(unnamed):
                key.admin = ROOT

    def create(self, name: str, role: str) -> IssuedAdminKey:
        with self._sessions.begin() as s:
            issued = self.add(s, name, role)
        self._tenants.forget_cached_keys()
        return issued

    def add(self, s: Session, name: str, role: str) -> IssuedAdminKey:
        """`create` in the caller's transaction (call `forget_cached_keys` after it)."""
        check_name("admin", name)
        if role not in OPERATOR_ROLES:
            raise InvalidName(f"role: expected one of {', '.join(ROLES)}, got {role[:40]!r}")
        if s.get(Admin, name) is not None:
            raise Conflict(f"admin {name!r} already exists")
        s.add(Admin(name=name, role=role))
        key = self._tenants.issue_operator_key(s, name, role)
        return IssuedAdminKey(name, role, key.split("_")[1], key)

    def list_admins(self) -> list[AdminInfo]:
        with self._sessions() as s:
            keys = s.scalars(select(ApiKey).where(ApiKey.admin.is_not(None))).all()
            return [
                AdminInfo(
                    a.name,
                    a.role,
                    a.created,
                    a.revoked,
                    tuple(k.key_id for k in keys if k.admin == a.name),
                )
                for a in s.scalars(select(Admin).order_by(Admin.name))
            ]

    def revoke(self, name: str) -> AdminInfo:
        """Revokes the operator and every key of it, from the next request on."""
        with self._sessions.begin() as s:
            answer = self.revoke_in(s, name)
        self._tenants.forget_cached_keys()
        return answer

    def revoke_in(self, s: Session, name: str) -> AdminInfo:
        """`revoke` in the caller's transaction (call `forget_cached_keys` after it)."""
        check_name("admin", name)
        admin = s.get(Admin, name)
        if admin is None:
            raise NotFound(f"no admin {name!r}")
        now = utcnow()
        admin.revoked = admin.revoked or now
        for key in s.scalars(select(ApiKey).where(ApiKey.admin == name)).all():
            key.revoked = key.revoked or now
        return AdminInfo(name, admin.role, admin.created, admin.revoked, ())

    def login(self, key: str, request_id: str | None, client: str | None) -> Principal:
        """An operator's key checked for the console's login, audited either way; tenant keys
        are refused like unknown ones (Unauthorized)."""
        try:
            principal = self._tenants.authenticate(key)
            if not principal.is_admin:
                raise Unauthorized("only an operator's key can log in")
        except Unauthorized:
            anonymous = Actor(None, operator="anonymous", request_id=request_id, client=client)
            self._audit.record(anonymous, "login", None, DENIED)
            raise
        actor = Actor(principal.key_id, principal.operator, "", request_id, client)
        self._audit.record(actor, "login", principal.operator)
        return principal
