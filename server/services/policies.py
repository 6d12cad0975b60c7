"""Per-tenant policy, quotas and suspension, stored in the database and enforced.

A tenant's row keeps only the fields an operator set; the rest come from the server's Settings
(the defaults). Every tenant's rules are held in memory, read once at start and rewritten by
every write of this service, so enforcing them costs a dict read on the hot path.
Every write publishes {"kind": "policy", "tenant": id} on the invalidation bus (server/services/
invalidation.py); each replica then calls `reload` (server/main.py), so policy, quota and
suspension changes reach every replica at once with Redis. Without it, one process only.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from typing import Any, Final

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import ArtifactRef, Model, ModelVersion, Tenant, TenantRules, utcnow
from server.errors import InvalidRules, NotFound
from server.services.limits import Limits
from server.services.models import BLOCKED, READY, ModelService
from server.services.signing_policy import (
    SIGNING_FIELDS,
    SigningPolicies,
    SigningPolicy,
    split_signing_fields,
)
from server.services.types import RegistrationRules, check_name
from server.settings import POLICY_FIELDS as SERVER_POLICY_FIELDS
from server.settings import Settings, bounds_of
from server.storage import ArtifactStore
from validator import Policy, ValidationFailed, validate
from validator.ops import REGISTRY

# The Policy fields an operator sets per tenant: the ops it may use, and every field the server
# sets (settings.POLICY_FIELDS, the one list; each field's bounds are its setting's).
POLICY_FIELDS: Final = ("allowed_ops", *SERVER_POLICY_FIELDS)
# Called in the transaction of each change with (session, action, target, detail): the
# operator service writes the change's audit row there (server/services/operators.py).
Recorder = Callable[[Session, str, str, Mapping[str, Any]], None]


def _unrecorded(_s: Session, _action: str, _target: str, _detail: Mapping[str, Any]) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Quota:
    """A tenant's quotas; 0 turns one off."""

    rate_per_s: float = 0.0
    burst: int = 1
    max_concurrent: int = 0  # inference requests in flight
    max_concurrent_uploads: int = 0  # uploads and checks in flight
    max_storage_bytes: int = 0  # program, params and ONNX bytes of its stored versions
    max_models: int = 0
    max_versions: int = 0  # stored versions of all its models together
    max_response_bytes: int = 0  # one inference's answer (server/dispatch/answer.py)
    max_json_response_bytes: int = 0  # its JSON text (binary outputs are not JSON)

    @classmethod
    def from_settings(cls, settings: Settings) -> Quota:
        """The quotas of every tenant without its own."""
        return cls(
            rate_per_s=settings.tenant_rate_per_s,
            burst=settings.tenant_rate_burst,
            max_concurrent=settings.tenant_max_concurrent,
            max_concurrent_uploads=settings.tenant_max_concurrent_uploads,
            max_storage_bytes=settings.tenant_max_storage_bytes,
            max_models=settings.tenant_max_models,
            max_versions=settings.tenant_max_versions,
            max_response_bytes=settings.max_response_bytes,
            max_json_response_bytes=settings.max_json_response_bytes,
        )


QUOTA_FIELDS: Final = tuple(f.name for f in fields(Quota))


@dataclass(frozen=True, slots=True)
class TenantRulesView:
    """A tenant's effective policy and quota, which fields are its own, and its suspension."""

    tenant: str
    policy: Policy
    quota: Quota
    policy_overrides: Mapping[str, Any]
    quota_overrides: Mapping[str, Any]
    suspended: datetime | None
    # require_signature and whom the tenant trusts: server/services/signing_policy.py
    signing: SigningPolicy = field(default_factory=SigningPolicy)

    def policy_json(self) -> dict[str, Any]:
        values = {name: getattr(self.policy, name) for name in POLICY_FIELDS}
        ops = self.policy.allowed_ops
        values["allowed_ops"] = sorted(REGISTRY.names() if ops is None else ops)
        return {**values, **self.signing.to_json()}


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """A policy write and what it did to the tenant's stored versions ("name/version")."""

    rules: TenantRulesView
    blocked: tuple[str, ...]
    unblocked: tuple[str, ...]


@dataclass(slots=True)
class _Rules:
    policy: Policy
    quota: Quota
    suspended: bool
    own_policy_fields: frozenset[str]


class PolicyService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        artifacts: ArtifactStore,
        models: ModelService,
        limits: Limits,
        *,
        default_policy: Policy,
        default_quota: Quota,
        publish: Callable[[dict[str, str]], None] | None = None,
        signing: SigningPolicies | None = None,
    ) -> None:
        self._sessions = sessions
        # require_signature and the signing trust: set here, kept and checked there.
        self.signing = signing or SigningPolicies(sessions)
        self._artifacts = artifacts
        self._models = models
        self._limits = limits
        self._default_policy = default_policy
        self._default_quota = default_quota
        self._rules: dict[str, _Rules] = {}  # tenant id -> its rules, when it has a row
        self.suspended: frozenset[str] = frozenset()  # tenant ids; read on every request
        self._write_lock = threading.Lock()
        self._load_lock = threading.Lock()  # a write here and a bus message may reload at once
        self._publish = publish
        self._load()

    # -- the hot path: memory only ---------------------------------------------------------

    def policy_of(self, tenant_id: str) -> Policy:
        rules = self._rules.get(tenant_id)
        return self._default_policy if rules is None else rules.policy

    def own_policy_fields(self, tenant_id: str) -> frozenset[str]:
        """The policy fields an operator set for this tenant (the rest are the server's)."""
        rules = self._rules.get(tenant_id)
        return frozenset() if rules is None else rules.own_policy_fields

    def quota_of(self, tenant_id: str) -> Quota:
        rules = self._rules.get(tenant_id)
        return self._default_quota if rules is None else rules.quota

    # -- operator use cases ----------------------------------------------------------------

    def show(self, tenant: str) -> TenantRulesView:
        with self._sessions() as s:
            return self._view(s, _tenant(s, tenant))

    def set_policy(
        self, tenant: str, changes: Mapping[str, Any], record: Recorder = _unrecorded
    ) -> PolicyChange:
        """Sets (a value) or resets (None) policy fields, then re-checks the tenant's stored
        versions: those the new policy refuses are blocked, those it passes unblocked.
        `record` is called in the transaction of each change (the write, each block/unblock)."""
        with self._write_lock:
            with self._sessions.begin() as s:
                found = _tenant(s, tenant, lock=True)
                signing, changes = split_signing_fields(changes)
                self.signing.write(s, found.id, signing)
                row = _rules_row(s, found)
                checked = _policy_changes(changes)
                overrides = {**json.loads(row.policy), **checked}
                overrides = {k: v for k, v in overrides.items() if v is not None}
                policy = self._policy_from(overrides)
                row.policy = json.dumps(overrides, sort_keys=True)
                tenant_id = row.tenant_id
                # The signing fields as given (PEM text is cut by the audit log's bounds).
                record(s, "policy.set", tenant, {"changes": {**checked, **signing}})
            self._load()
            blocked, unblocked = self._recheck(tenant_id, policy, record)
        self._announce(tenant_id)  # after the re-check: the statuses are committed
        return PolicyChange(self.show(tenant), blocked, unblocked)

    def set_quota(
        self, tenant: str, changes: Mapping[str, Any], record: Recorder = _unrecorded
    ) -> TenantRulesView:
        with self._write_lock:
            with self._sessions.begin() as s:
                row = _rules_row(s, _tenant(s, tenant, lock=True))
                checked = _quota_changes(changes)
                overrides = {**json.loads(row.quota), **checked}
                overrides = {k: v for k, v in overrides.items() if v is not None}
                row.quota = json.dumps(overrides, sort_keys=True)
                tenant_id = row.tenant_id
                record(s, "quota.set", tenant, {"changes": checked})
            self._load()
        self._announce(tenant_id)
        return self.show(tenant)

    def suspend(
        self, tenant: str, suspended: bool, record: Recorder = _unrecorded
    ) -> TenantRulesView:
        with self._write_lock:
            with self._sessions.begin() as s:
                row = _rules_row(s, _tenant(s, tenant, lock=True))
                row.suspended = (row.suspended or utcnow()) if suspended else None
                tenant_id = row.tenant_id
                record(s, "tenant.suspend" if suspended else "tenant.resume", tenant, {})
            self._load()
        self._announce(tenant_id)
        return self.show(tenant)

    def rules_for_update(self, s: Session, tenant_id: str) -> RegistrationRules:
        """The tenant's policy and quotas as committed, read in the caller's transaction with
        the tenant's row locked (FOR UPDATE; SQLite serializes writers anyway), the lock every
        policy or quota write takes too: an upload registers its version against these, and
        neither slips between the other's check and commit."""
        # A write first, then the reads: SQLite ignores FOR UPDATE and its driver begins the
        # transaction only at the first write, so a read before it could see the rules a policy
        # write was about to replace (a version registered ready over the tightened policy,
        # after its re-check had run). The write takes SQLite's write lock before the rules are
        # read; under PostgreSQL it locks the tenant's row, as FOR UPDATE would.
        s.execute(update(Tenant).where(Tenant.id == tenant_id).values(name=Tenant.name))
        row = s.get(TenantRules, tenant_id)
        policy = self._policy_from(json.loads(row.policy)) if row else self._default_policy
        quota = self._quota_from(json.loads(row.quota)) if row else self._default_quota
        return RegistrationRules(
            policy, quota.max_models, quota.max_versions, quota.max_storage_bytes
        )

    def reload(self, tenant_id: str | None = None) -> None:
        """Another replica changed a tenant's rules (`tenant_id`; None: maybe any): reads every
        tenant's rules again and forgets the tenant's cached model lookups (versions may have
        been blocked or unblocked)."""
        self._load()
        if tenant_id is None:
            self._models.drop_lookups()
        else:
            self._models.forget_tenant(tenant_id)

    def storage_bytes(self, tenant_id: str) -> int:
        """Bytes of the tenant's stored artifacts (each distinct one once)."""
        with self._sessions() as s:
            shas = {
                sha
                for v in _versions(s, tenant_id)
                for sha in (v.program_sha256, v.params_sha256, v.onnx_sha256)
                if sha is not None
            }
            # The sizes the artifact_refs bookkeeping keeps: no store round trip (S3 or folder).
            sizes = s.scalars(select(ArtifactRef.size_bytes).where(ArtifactRef.sha256.in_(shas)))
            return sum(sizes)

    def counts(self, tenant_id: str) -> tuple[int, int]:
        """(models, stored versions) of the tenant."""
        with self._sessions() as s:
            models = s.scalars(select(Model.id).where(Model.tenant_id == tenant_id)).all()
            return len(models), len(_versions(s, tenant_id))

    # -- helpers ---------------------------------------------------------------------------

    def _policy_from(self, overrides: Mapping[str, Any]) -> Policy:
        values = dict(overrides)
        if "allowed_ops" in values:
            values["allowed_ops"] = frozenset(values["allowed_ops"])
        return replace(self._default_policy, **values)

    def _quota_from(self, overrides: Mapping[str, Any]) -> Quota:
        return replace(self._default_quota, **overrides)

    def _announce(self, tenant_id: str) -> None:
        if self._publish is not None:
            self._publish({"kind": "policy", "tenant": tenant_id})

    def _load(self) -> None:
        """Reads every tenant's rules into memory and hands the limiters their overrides."""
        with self._load_lock:
            self._load_locked()

    def _load_locked(self) -> None:
        self.signing.load()
        with self._sessions() as s:
            rows = s.scalars(select(TenantRules)).all()
            loaded = {
                r.tenant_id: _Rules(
                    self._policy_from(json.loads(r.policy)),
                    self._quota_from(json.loads(r.quota)),
                    r.suspended is not None,
                    frozenset(json.loads(r.policy)),
                )
                for r in rows
            }
            own_quota = {r.tenant_id: json.loads(r.quota) for r in rows}
        self._rules = loaded
        self.suspended = frozenset(t for t, r in loaded.items() if r.suspended)
        for tenant_id, own in own_quota.items():
            self._limits.rate.override(tenant_id, own.get("rate_per_s"), own.get("burst"))
            self._limits.concurrency.override(tenant_id, own.get("max_concurrent"))
            # Uploads and checks: the compile queue's per-tenant cap (429 TOO_MANY_COMPILES).
            self._limits.compiles.slots.override(tenant_id, own.get("max_concurrent_uploads"))

    def _recheck(
        self, tenant_id: str, policy: Policy, record: Recorder = _unrecorded
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        blocked: list[str] = []
        unblocked: list[str] = []
        signing = self.signing.of(tenant_id)
        with self._sessions.begin() as s:
            for row in _versions(s, tenant_id):
                if row.status not in (READY, BLOCKED):
                    continue
                provenance = None if row.provenance is None else json.loads(row.provenance)
                passes = signing.accepts(provenance) and self._passes(row, policy)
                label = f"{row.model.name}/{row.version}"
                if row.status == READY and not passes:
                    row.status = BLOCKED
                    blocked.append(label)
                    record(s, "model.block", label, {})
                elif row.status == BLOCKED and passes:
                    row.status = READY
                    unblocked.append(label)
                    record(s, "model.unblock", label, {})
        self._models.forget_tenant(tenant_id)
        return tuple(blocked), tuple(unblocked)

    def passes(self, tenant_id: str, program: bytes, params: bytes | None) -> bool:
        """Whether a program passes the tenant's current policy (validation only, no compile)."""
        try:
            validate(program, params, self.policy_of(tenant_id))
        except ValidationFailed:
            return False
        return True

    def _passes(self, row: ModelVersion, policy: Policy) -> bool:
        program = self._artifacts.get(row.program_sha256)
        params = None if row.params_sha256 is None else self._artifacts.get(row.params_sha256)
        try:
            validate(program, params, policy)
        except ValidationFailed:
            return False
        return True

    def _view(self, s: Session, tenant: Tenant) -> TenantRulesView:
        row = s.get(TenantRules, tenant.id)
        policy_own = {} if row is None else json.loads(row.policy)
        quota_own = {} if row is None else json.loads(row.quota)
        signing = self.signing.of(tenant.id)
        return TenantRulesView(
            tenant.name,
            self._policy_from(policy_own),
            self._quota_from(quota_own),
            {**policy_own, **signing.overrides()},
            quota_own,
            None if row is None else row.suspended,
            signing,
        )


def quota_json(quota: Quota) -> dict[str, Any]:
    return asdict(quota)


def _tenant(s: Session, name: str, *, lock: bool = False) -> Tenant:
    """The tenant named `name`; with `lock`, its row locked for the rest of the transaction
    (the lock an upload's registration takes: `rules_for_update`)."""
    check_name("tenant", name)
    if lock:  # a write first, as in `rules_for_update`: SQLite's write lock before the reads
        s.execute(update(Tenant).where(Tenant.name == name).values(name=Tenant.name))
    query = select(Tenant).where(Tenant.name == name)
    tenant = s.scalars(query.with_for_update() if lock else query).first()
    if tenant is None:
        raise NotFound(f"no tenant {name!r}")
    return tenant


def _rules_row(s: Session, tenant: Tenant) -> TenantRules:
    row = s.get(TenantRules, tenant.id)
    if row is None:
        row = TenantRules(tenant_id=tenant.id, policy="{}", quota="{}")
        s.add(row)
    return row


def _versions(s: Session, tenant_id: str) -> list[ModelVersion]:
    query = select(ModelVersion).join(Model).where(Model.tenant_id == tenant_id)
    return list(s.scalars(query.order_by(ModelVersion.id)))


def _policy_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The changes checked field by field: "expected X, got Y" for the first bad one."""
    checked: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in POLICY_FIELDS:
            known = ", ".join((*POLICY_FIELDS, *SIGNING_FIELDS))
            raise InvalidRules(f"policy: expected one of {known}, got {name!r:.80}")
        checked[name] = value if value is None else _policy_value(name, value)
    return checked


def _policy_value(name: str, value: Any) -> Any:
    if name == "allowed_ops":
        if not isinstance(value, list) or not all(isinstance(op, str) for op in value):
            raise InvalidRules(f"allowed_ops: expected a list of op types, got {value!r:.80}")
        unknown = sorted(set(value) - set(REGISTRY.names()))
        if unknown:
            raise InvalidRules(
                f"allowed_ops: expected registered op types, got {unknown[:5]!r:.200}"
            )
        return sorted(set(value))
    low, high = bounds_of(name)
    return _integer(f"policy {name}", value, low, high)


def _quota_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in QUOTA_FIELDS:
            raise InvalidRules(
                f"quota: expected one of {', '.join(QUOTA_FIELDS)}, got {name!r:.80}"
            )
        if value is None:
            checked[name] = None
        elif name == "rate_per_s":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or value < 0:
                raise InvalidRules(f"quota rate_per_s: expected a number >= 0, got {value!r:.40}")
            checked[name] = float(value)
        else:
            checked[name] = _integer(f"quota {name}", value, 1 if name == "burst" else 0, 2**62)
    return checked


def _integer(what: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidRules(f"{what}: expected an integer from {low} to {high}, got {value!r:.40}")
    return value
