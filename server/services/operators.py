"""Every operator action, once: the admin REST routes, the console's forms and (over the REST
API) the CLI call these and nothing else.

Each action checks the operator's role (a viewer changes nothing: ReadOnlyOperator, its
attempt audited as denied), makes the change and writes its audit row in the same
transaction, so a change is never committed without its row nor a row without its change.
What must follow a commit (dropping cached keys or lookups here and in every replica,
deleting freed artifacts) runs after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from server.errors import Forbidden, ReadOnlyOperator
from server.services.admins import AdminInfo, AdminService, IssuedAdminKey
from server.services.audit import DENIED, Actor, AuditService, add
from server.services.metrics import Metrics
from server.services.models import ModelService
from server.services.policies import PolicyChange, PolicyService, TenantRulesView
from server.services.quarantine import DbQuarantine
from server.services.tenants import TenantService
from server.services.types import IssuedKey, KeyInfo, Principal


@dataclass(frozen=True, slots=True)
class Operator:
    """Who acts: an operator's key (never a body field), with its request id and address."""

    principal: Principal
    request_id: str | None = None
    client: str | None = None

    @property
    def actor(self) -> Actor:
        p = self.principal
        return Actor(p.key_id, p.operator, "", self.request_id, self.client)


def forget_series(
    metrics: Metrics, models: ModelService, tenant_id: str, name: str, version: int | None
) -> None:
    """After a delete: the metric series of the version go, and the model's with its last."""
    metrics.forget_model(tenant_id, name, version)
    if version is not None and not models.has_versions(tenant_id, name):
        metrics.forget_model(tenant_id, name, None)


class OperatorService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        tenants: TenantService,
        admins: AdminService,
        policies: PolicyService,
        models: ModelService,
        audit: AuditService,
        quarantine: DbQuarantine,
        metrics: Metrics,
    ) -> None:
        self._sessions = sessions
        self._tenants = tenants
        self._admins = admins
        self._policies = policies
        self._models = models
        self._audit = audit
        self._quarantine = quarantine
        self._metrics = metrics

    # -- tenants and keys --------------------------------------------------------------------

    def create_tenant(self, who: Operator, name: str) -> IssuedKey:
        """A tenant and its first key (two changes, two rows)."""
        self._may_write(who, "tenant.create", name[:64], name[:64])
        with self._sessions.begin() as s:
            issued = self._tenants.add_tenant(s, name)
            add(s, who.actor, "tenant.create", issued.tenant, tenant=issued.tenant)
            add(s, who.actor, "key.create", issued.key_id, tenant=issued.tenant)
        self._tenants.forget_cached_keys()
        return issued

    def create_key(self, who: Operator, tenant: str) -> IssuedKey:
        self._may_write(who, "key.create", None, tenant[:64])
        with self._sessions.begin() as s:
            issued = self._tenants.add_key(s, tenant)
            add(s, who.actor, "key.create", issued.key_id, tenant=issued.tenant)
        self._tenants.forget_cached_keys()
        return issued

    def revoke_key(self, who: Operator, key_id: str, tenant: str | None = None) -> KeyInfo:
        """Revokes a key (with `tenant`: only a key of that tenant)."""
        self._may_write(who, "key.revoke", key_id[:64], tenant)
        with self._sessions.begin() as s:
            revoked = self._tenants.revoke_key_in(s, key_id, tenant)
            add(s, who.actor, "key.revoke", key_id, tenant=tenant)
        self._tenants.forget_cached_keys()
        return revoked

    # -- operators ---------------------------------------------------------------------------

    def create_admin(self, who: Operator, name: str, role: str) -> IssuedAdminKey:
        self._may_write(who, "admin.create", name[:64])
        with self._sessions.begin() as s:
            issued = self._admins.add(s, name, role)
            add(s, who.actor, "admin.create", issued.name, detail={"role": issued.role})
        self._tenants.forget_cached_keys()
        return issued

    def revoke_admin(self, who: Operator, name: str) -> AdminInfo:
        self._may_write(who, "admin.revoke", name[:64])
        with self._sessions.begin() as s:
            revoked = self._admins.revoke_in(s, name)
            add(s, who.actor, "admin.revoke", name)
        self._tenants.forget_cached_keys()
        return revoked

    # -- a tenant's policy, quota and suspension -------------------------------------------------

    def set_policy(self, who: Operator, tenant: str, changes: Mapping[str, Any]) -> PolicyChange:
        """Sets policy fields; the versions it blocks or unblocks are audited as it does."""
        self._may_write(who, "policy.set", tenant[:64], tenant[:64])
        return self._policies.set_policy(tenant, changes, self._recorder(who, tenant))

    def set_quota(self, who: Operator, tenant: str, changes: Mapping[str, Any]) -> TenantRulesView:
        self._may_write(who, "quota.set", tenant[:64], tenant[:64])
        return self._policies.set_quota(tenant, changes, self._recorder(who, tenant))

    def suspend(self, who: Operator, tenant: str, suspended: bool) -> TenantRulesView:
        action = "tenant.suspend" if suspended else "tenant.resume"
        self._may_write(who, action, tenant[:64], tenant[:64])
        return self._policies.suspend(tenant, suspended, self._recorder(who, tenant))

    # -- a tenant's model versions -------------------------------------------------------------

    def set_batching(
        self,
        who: Operator,
        tenant: str,
        name: str,
        version: int,
        batching: Mapping[str, Any] | None,
    ) -> None:
        """A version's dynamic batching override; None: back to the server's defaults."""
        action = "batching.set" if batching is not None else "batching.reset"
        target = f"{name[:64]}/{version}"
        self._may_write(who, action, target, tenant[:64])
        with self._sessions.begin() as s:
            tenant_id = self._models.set_batching_in(s, tenant, name, version, batching)
            detail = {} if batching is None else {"batching": dict(batching)}
            add(s, who.actor, action, target, tenant=tenant, detail=detail)
        self._models.after_admin_write(tenant_id, name)

    def release(self, who: Operator, tenant: str, name: str, version: int) -> None:
        """Lets a quarantined version run again, in every replica."""
        target = f"{name[:64]}/{version}"
        self._may_write(who, "model.release", target, tenant[:64])
        with self._sessions.begin() as s:
            tenant_id = self._models.release_in(s, tenant, name, version)
            add(s, who.actor, "model.release", target, tenant=tenant)
        self._quarantine.reload()
        self._models.after_admin_write(tenant_id, name)

    def delete_model(self, who: Operator, tenant: str, name: str, version: int | None) -> None:
        """Deletes one version of a tenant's model, or (`version` None) the whole model."""
        target = name[:64] if version is None else f"{name[:64]}/{version}"
        self._may_write(who, "model.delete", target, tenant[:64])
        with self._sessions.begin() as s:
            tenant_id, freed = self._models.delete_in(s, tenant, name, version)
            add(s, who.actor, "model.delete", target, tenant=tenant)
        self._models.after_admin_delete(tenant_id, name, freed)
        forget_series(self._metrics, self._models, tenant_id, name, version)

    # -- helpers -----------------------------------------------------------------------------

    def _may_write(
        self, who: Operator, action: str, target: str | None, tenant: str | None = None
    ) -> None:
        """Only an operator of role admin changes anything; a viewer's attempt is audited
        (outcome denied) and refused."""
        p = who.principal
        if not p.is_admin:
            raise Forbidden("this action needs an operator's key")
        if p.read_only:
            self._audit.record(who.actor, action, target, DENIED, tenant=tenant)
            raise ReadOnlyOperator(
                f"expected an operator of role admin to change this, got viewer {p.operator!r}"
            )

    def _recorder(self, who: Operator, tenant: str) -> Any:
        """The policy service's Recorder: one audit row in the transaction of each change."""

        def record(s: Session, action: str, target: str, detail: Mapping[str, Any]) -> None:
            add(s, who.actor, action, target, tenant=tenant, detail=detail)

        return record
