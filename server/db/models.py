"""Every table: tenants, their API keys, their models and each model's versions, artifact
references, operators, tenant rules, the audit log, rejections and console sessions."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # SQLite keeps no zone: naive UTC throughout


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # server-generated, random
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    """Only the sha256 of the secret is kept; `key_id` is the non-secret lookup prefix."""

    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16))  # "tenant" or "admin"
    hash: Mapped[str] = mapped_column(String(64))
    created: Mapped[datetime] = mapped_column(default=utcnow)
    revoked: Mapped[datetime | None] = mapped_column(default=None)
    admin: Mapped[str | None] = mapped_column(String(64), default=None)  # operator keys: the name


class Model(Base):
    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    # Version numbers are never reused, even after a version is deleted.
    next_version: Mapped[int] = mapped_column(default=1)
    created: Mapped[datetime] = mapped_column(default=utcnow)
    versions: Mapped[list[ModelVersion]] = relationship(
        back_populates="model",
        cascade="all, delete-orphan",
        order_by="ModelVersion.version",
        passive_deletes=True,
    )


class ModelVersion(Base):
    """A row exists only once every artifact it names is durably stored."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    version: Mapped[int]
    status: Mapped[str] = mapped_column(String(16))  # "ready", "blocked" or "quarantined"
    program_sha256: Mapped[str] = mapped_column(String(64))
    params_sha256: Mapped[str | None] = mapped_column(String(64))
    onnx_sha256: Mapped[str] = mapped_column(String(64))
    report: Mapped[str] = mapped_column(Text)  # the validator's report, JSON
    # The admin's dynamic batching override (server/dispatch/batching.py BatchPolicy JSON); NULL: defaults.
    batching: Mapped[str | None] = mapped_column(Text, default=None)
    # Who signed the upload (server/dispatch/signing.py Provenance JSON, migration 0006); NULL: unsigned.
    provenance: Mapped[str | None] = mapped_column(Text, default=None)
    # The upload's declared dims ({"D1": 128}, JSON, migration 0008): every compile of the
    # version validates at them. NULL: none declared.
    dims: Mapped[str | None] = mapped_column(Text, default=None)
    created: Mapped[datetime] = mapped_column(default=utcnow)
    model: Mapped[Model] = relationship(back_populates="versions")


class ArtifactRef(Base):
    """How many version rows name an artifact, and its size: the artifact is deleted when the
    count reaches 0 (row first, then the file), and tenants' storage quotas add the sizes up."""

    __tablename__ = "artifact_refs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    refs: Mapped[int]


# -- the operator's side (migration 0003) -----------------------------------------------------


class Admin(Base):
    """A named operator; its key is an `api_keys` row with role "admin" or "viewer"."""

    __tablename__ = "admins"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))  # "admin" or "viewer"
    created: Mapped[datetime] = mapped_column(default=utcnow)
    revoked: Mapped[datetime | None] = mapped_column(default=None)


class TenantRules(Base):
    """A tenant's policy and quota overrides (JSON, only the fields set) and suspension."""

    __tablename__ = "tenant_rules"

    tenant_id: Mapped[str] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    policy: Mapped[str] = mapped_column(Text, default="{}")
    quota: Mapped[str] = mapped_column(Text, default="{}")
    suspended: Mapped[datetime | None] = mapped_column(default=None)


class TenantSigning(Base):
    """A tenant's signing policy (migration 0006; server/services/signing_policy.py): whether
    uploads must be signed, its trusted PEM public keys (a JSON list), its PEM CA bundle and the
    certificate identities it allows (a JSON list)."""

    __tablename__ = "tenant_signing"

    tenant_id: Mapped[str] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    require_signature: Mapped[bool] = mapped_column(Boolean, default=False)
    keys: Mapped[str] = mapped_column(Text, default="[]")
    ca: Mapped[str] = mapped_column(Text, default="")
    identities: Mapped[str] = mapped_column(Text, default="[]")


class AuditEntry(Base):
    """One state change; append-only (no code path updates or deletes a row)."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(80))  # "admin:<name>" or "tenant:<name>"
    key_id: Mapped[str | None] = mapped_column(String(32))
    tenant: Mapped[str | None] = mapped_column(String(64), index=True)
    action: Mapped[str] = mapped_column(String(32), index=True)
    target: Mapped[str | None] = mapped_column(String(200))
    outcome: Mapped[str] = mapped_column(String(16))  # "ok", "rejected", "denied", "failed"
    detail: Mapped[str] = mapped_column(Text, default="{}")  # JSON: codes, sha256s, fields
    request_id: Mapped[str | None] = mapped_column(String(64))
    client: Mapped[str | None] = mapped_column(String(64))


class Rejection(Base):
    """A rejected upload with its full diagnostics; the newest N per tenant are kept."""

    __tablename__ = "rejections"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    name: Mapped[str] = mapped_column(String(64))
    code: Mapped[str] = mapped_column(String(64))
    program_sha256: Mapped[str] = mapped_column(String(64))
    params_sha256: Mapped[str | None] = mapped_column(String(64))
    diagnostics: Mapped[str] = mapped_column(Text)  # JSON list of Diagnostic.to_json()


class ModelCrash(Base):
    """One worker crash charged to a model version (migration 0006): counted across replicas
    within the quarantine window; the version's status turns "quarantined" past the count."""

    __tablename__ = "model_crashes"
    __table_args__ = (Index("ix_model_crashes_version", "tenant_id", "model", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(64))
    version: Mapped[int]
    at: Mapped[datetime] = mapped_column(default=utcnow)


class ConsoleSession(Base):
    """One login of an operator (migration 0004); `id_hash` is the sha256 of the cookie."""

    __tablename__ = "console_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    operator: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str] = mapped_column(String(32))
    read_only: Mapped[bool] = mapped_column(Boolean)
    created: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(default=utcnow)
    ended: Mapped[datetime | None] = mapped_column(default=None)
