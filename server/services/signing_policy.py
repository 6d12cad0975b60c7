"""Per-tenant signing policy: whether every upload must be signed, and whom the tenant trusts.

Set with the other policy fields (`PUT /v1/admin/tenants/{tenant}/policy`, the console,
`graphgate policy set`) and kept in its own table (`tenant_signing`, migration 0006): its fields
are `require_signature`, `signing_keys` (PEM public keys), `signing_ca` (a PEM CA bundle) and
`signing_identities` (the certificate subjects or SANs allowed). Keys and certificates are
parsed when set (400 INVALID_SIGNING_KEY / INVALID_SIGNING_CA). Like the rest of the policy,
every tenant's is held in memory and read again by PolicyService's reload.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from server.db.models import TenantSigning as TenantSigningRow
from server.dispatch.signing import (
    CERTIFICATE,
    KEY,
    MAX_IDENTITIES,
    MAX_IDENTITY_CHARS,
    MAX_KEYS,
    Provenance,
    SignatureCheck,
    SigningTrust,
    ca_certificates_in,
    check_bundle_size,
    fingerprint_of_pem,
    public_keys_in,
)
from server.errors import InvalidRules, InvalidSigningCa, InvalidSigningKey, SignatureMissing

SIGNING_FIELDS: Final = (
    "require_signature",
    "signing_keys",
    "signing_ca",
    "signing_identities",
)


@dataclass(frozen=True, slots=True)
class SignatureFile:
    """An upload's `signature` part and the names its program and params came under."""

    bundle: bytes
    program_name: str
    params_name: str | None


@dataclass(frozen=True, slots=True)
class SigningPolicy:
    """A tenant's signing policy; the defaults: signatures optional, nobody trusted."""

    required: bool = False
    trust: SigningTrust = field(default_factory=SigningTrust)

    def to_json(self) -> dict[str, Any]:
        return {
            "require_signature": self.required,
            "signing_keys": list(self.trust.keys),
            "signing_ca": self.trust.ca,
            "signing_identities": list(self.trust.identities),
        }

    def overrides(self) -> dict[str, Any]:
        """The fields an operator set (those away from their defaults)."""
        default = SigningPolicy().to_json()
        return {k: v for k, v in self.to_json().items() if v != default[k]}

    def accepts(self, provenance: Mapping[str, Any] | None) -> bool:
        """Whether a stored version with this provenance may be served: anything while
        signatures are optional; else one signed by a key still trusted, or by a certificate
        identity still allowed under a CA still set."""
        if not self.required:
            return True
        if provenance is None:
            return False
        signed = Provenance.from_json(provenance)
        if signed.method == KEY:
            return signed.key_fingerprint in {fingerprint_of_pem(k) for k in self.trust.keys}
        return (
            signed.method == CERTIFICATE
            and bool(self.trust.ca)
            and (signed.signer in self.trust.identities)
        )


class SigningPolicies:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._by_tenant: dict[str, SigningPolicy] = {}
        self._lock = threading.Lock()
        self.load()

    def of(self, tenant_id: str) -> SigningPolicy:
        """The tenant's signing policy, from memory (the defaults for the server's own checks)."""
        return self._by_tenant.get(tenant_id) or SigningPolicy()

    def signature_check(
        self, tenant_id: str, signature: SignatureFile | None
    ) -> SignatureCheck | None:
        """What the compile worker verifies for this upload or check; None for an unsigned one
        the tenant allows; SignatureMissing for one it does not."""
        policy = self.of(tenant_id)
        if signature is None:
            if policy.required:
                raise SignatureMissing(
                    "expected a signature part (the tenant's policy require_signature is on), "
                    "got an unsigned upload"
                )
            return None
        check_bundle_size(signature.bundle)  # a huge part never travels to a worker
        return SignatureCheck(
            signature.bundle,
            signature.program_name,
            signature.params_name,
            policy.trust,
            datetime.now(UTC),
        )

    def load(self) -> None:
        with self._lock, self._sessions() as s:
            rows = s.scalars(select(TenantSigningRow)).all()
            self._by_tenant = {row.tenant_id: _from_row(row) for row in rows}

    @staticmethod
    def write(s: Session, tenant_id: str, changes: Mapping[str, Any]) -> None:
        """Sets (a value) or resets (None) signing fields in the caller's transaction; each is
        checked first ("expected X, got Y"; a key or CA that does not parse has its own code)."""
        if not changes:
            return
        checked = {name: _checked(name, value) for name, value in changes.items()}
        row = s.get(TenantSigningRow, tenant_id)
        if row is None:
            row = TenantSigningRow(tenant_id=tenant_id)
            s.add(row)
        current = _from_row(row).to_json()
        merged = {**current, **{k: _default(k) if v is None else v for k, v in checked.items()}}
        row.require_signature = merged["require_signature"]
        row.keys = json.dumps(merged["signing_keys"])
        row.ca = merged["signing_ca"]
        row.identities = json.dumps(merged["signing_identities"])


def split_signing_fields(
    changes: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the signing fields of a policy change, the others)."""
    signing = {k: v for k, v in changes.items() if k in SIGNING_FIELDS}
    return signing, {k: v for k, v in changes.items() if k not in SIGNING_FIELDS}


def _from_row(row: TenantSigningRow) -> SigningPolicy:
    trust = SigningTrust(
        tuple(json.loads(row.keys or "[]")),
        row.ca or "",
        tuple(json.loads(row.identities or "[]")),
    )
    return SigningPolicy(bool(row.require_signature), trust)


def _default(name: str) -> Any:
    return SigningPolicy().to_json()[name]


def _checked(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name == "require_signature":
        if not isinstance(value, bool):
            raise InvalidRules(
                f"policy require_signature: expected true or false, got {value!r:.40}"
            )
        return value
    if name == "signing_keys":
        return _keys(value)
    if name == "signing_ca":
        if not isinstance(value, str):
            raise InvalidSigningCa(
                f"signing_ca: expected a PEM CA bundle as text, got {value!r:.40}"
            )
        if not value.strip():
            return ""
        ca_certificates_in(value)
        return value.strip() + "\n"
    return _identities(value)


def _keys(value: Any) -> list[str]:
    """A PEM text or a list of them (each may hold several keys): one PEM per key, in order,
    each once."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise InvalidSigningKey(
            f"signing_keys: expected PEM public keys (text or a list of texts), got {value!r:.40}"
        )
    keys: list[str] = []
    for text in texts:
        keys.extend(k for k in public_keys_in(text) if k not in keys)
    if len(keys) > MAX_KEYS:
        raise InvalidSigningKey(f"signing_keys: expected at most {MAX_KEYS} keys, got {len(keys)}")
    return keys


def _identities(value: Any) -> list[str]:
    ok = isinstance(value, list) and all(
        isinstance(i, str) and 0 < len(i.strip()) <= MAX_IDENTITY_CHARS for i in value
    )
    if not ok or len(value) > MAX_IDENTITIES:
        raise InvalidRules(
            f"policy signing_identities: expected a list of at most {MAX_IDENTITIES} certificate "
            f"subjects or SANs (1 to {MAX_IDENTITY_CHARS} characters each), got {value!r:.60}"
        )
    return list(dict.fromkeys(i.strip() for i in value))
