"""Model use cases: upload (validate, compile, store), list, get, delete, download, resolve."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from executor import SessionOptions
from server.db.models import Model, ModelVersion, Tenant

# NOTE: compiled in a worker process (server/dispatch): the server holds its signature only.
from server.dispatch import Digests, PoolSettings, RemoteModel, WorkerPool, WorkerStats
from server.dispatch.signing import SignatureCheck
from server.errors import Forbidden, ModelBlocked, ModelRejected, NotFound
from server.services.artifact_refs import ArtifactRefs
from server.services.limits import StorageQuotaExceeded
from server.services.types import (
    CheckedModel,
    LoadedModel,
    Principal,
    StoredModel,
    StoredVersion,
    UploadedModel,
    check_name,
)
from server.storage import ArtifactStore
from validator import DEFAULT_POLICY, Policy, ValidationFailed

READY: Final = "ready"
QUARANTINED: Final = "quarantined"  # crashed its workers; an admin may release it
BLOCKED: Final = "blocked"  # no longer passes its tenant's policy: kept, not served

# Compiled sessions are keyed by their artifacts' content (program and params sha256), never by
# tenant/name/version: a version deleted and uploaded again with other bytes (by any replica)
# can never be answered by the old graph, and identical uploads share one session.
_CacheKey = tuple[str, str | None, Policy]  # program, params, the policy it was checked with
_LookupKey = tuple[str, str, int | None]  # (tenant, name, version or None for the latest)
# Past this many cached lookups the lookup cache starts over (only lookups that found a ready
# version are cached, so this takes that many models in use within one TTL).
_MAX_LOOKUPS: Final = 10_000
# A first upload of a name racing another replica's loses on the unique key once, then finds it.
_REGISTER_TRIES: Final = 3


class ModelService:
    """Every lookup is by (tenant, name): another tenant's model is NotFound, like a missing one.

    Two caches: compiled programs by content hash (LRU, `cache_size`), and lookups (tenant,
    name, version or latest) -> the resolved version, so that resolving a model on the hot path
    reads no database. Every upload and delete of this service drops the name's lookups before
    it returns: a deleted model is NotFound and a new upload is the latest from the next
    request on. Writes by other replicas arrive through `publish` (server/services/
    invalidation.py, with Redis) and `drop_lookups`; without it they are seen when a lookup
    expires, `lookup_ttl_s` after it was cached. `lookup_ttl_s` 0 turns the lookup cache off.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        artifacts: ArtifactStore,
        *,
        policy: Policy = DEFAULT_POLICY,
        options: SessionOptions | None = None,
        pool: WorkerPool | None = None,
        cache_size: int = 64,
        lookup_ttl_s: float = 5.0,
        storage_quota_for: Callable[[str], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        publish: Callable[[dict[str, str]], None] | None = None,
        policy_for: Callable[[str], Policy] | None = None,
    ) -> None:
        self._sessions = sessions
        self._artifacts = artifacts
        # The tenant's storage quota in bytes (0: none), checked where the artifact references
        # are counted, in the transaction that adds the version (shared artifacts count once).
        self._refs = ArtifactRefs(sessions, artifacts, storage_quota_for or (lambda _tenant: 0))
        self._policy = policy
        # The tenant's own policy (server/services/policies.py); `policy` for every tenant without.
        self._policy_for = policy_for or (lambda _tenant: policy)
        self._options = options or SessionOptions()
        self._pool = pool or WorkerPool(PoolSettings(workers=1))
        self._cache_size = cache_size
        self._cache: OrderedDict[_CacheKey, RemoteModel] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._build_locks: dict[_CacheKey, threading.Lock] = {}
        self._register_lock = threading.Lock()
        self._lookup_ttl_s = lookup_ttl_s
        self._clock = clock
        self._publish = publish
        # -> (the resolved version, its content key, expiry)
        self._lookups: dict[_LookupKey, tuple[LoadedModel, _CacheKey, float]] = {}
        # Per (tenant, name), bumped by every upload and delete of it: a lookup that read the
        # database before such a write caches nothing (a long compile is not thrown away for
        # another model's write).
        self._writes: dict[tuple[str, str], int] = {}
        self._epoch = 0  # bumped when every lookup is dropped at once

    # -- use cases -------------------------------------------------------------------------

    def check(
        self,
        program: bytes,
        params: bytes | None,
        tenant_id: str = "",
        signature: SignatureCheck | None = None,
    ) -> CheckedModel:
        """Verifies the signature when there is one, then validates (with the tenant's policy
        when given), lowers and gates without storing anything; returns the report."""
        policy = self._policy_for(tenant_id) if tenant_id else self._policy
        digests = Digests.of(program, params)
        compiled = self._compile(program, params, policy, digests, signature)
        return CheckedModel(compiled.program.report, compiled.provenance)

    def upload(
        self,
        principal: Principal,
        name: str,
        program: bytes,
        params: bytes | None,
        digests: Digests | None = None,
        signature: SignatureCheck | None = None,
    ) -> UploadedModel:
        """Adds a version of `name`: artifacts first, the database row last (crash-safe).
        `digests`: the caller's hashes of program and params (else computed here, once);
        `signature`: verified in the worker before anything else, its signer kept."""
        tenant = _tenant_of(principal)
        _check_name(name)
        policy = self._policy_for(tenant)
        digests = digests or Digests.of(program, params)
        compiled = self._compile(program, params, policy, digests, signature)
        report = compiled.program.report
        provenance = compiled.provenance
        shas = (
            self._artifacts.put(program, digests.program),
            None if params is None else self._artifacts.put(params, digests.params),
            self._artifacts.put(onnx := compiled.onnx_bytes),  # readable once (workers)
        )
        sizes = _sizes(shas, (program, params, onnx))
        try:
            signed = None if provenance is None else json.dumps(provenance.to_json())
            version = self._register(
                tenant, name, shas, json.dumps(report.to_json()), sizes, signed
            )
        except StorageQuotaExceeded:
            self._refs.collect(list(sizes))  # what this upload stored and nothing else names
            raise
        self._refs.keep_stored(
            (sha, blob)
            for sha, blob in zip(shas, (program, params, onnx), strict=True)
            if sha is not None and blob is not None
        )
        self._remember((shas[0], shas[1], policy), compiled)
        self._invalidate(tenant, name)  # "latest" is the new version from now on
        return UploadedModel(name, version, READY, report, provenance)

    def list_models(self, principal: Principal) -> list[StoredModel]:
        tenant = _tenant_of(principal)
        with self._sessions() as s:
            rows = s.scalars(select(Model).where(Model.tenant_id == tenant).order_by(Model.name))
            return [_stored(m) for m in rows]

    def get_model(self, principal: Principal, name: str) -> StoredModel:
        with self._sessions() as s:
            stored = _stored(self._model(s, principal, name))
        return self._with_quarantine(principal.tenant_id, stored)

    def release(self, tenant_name: str, name: str, version: int) -> None:
        """Admin: lets a quarantined version run again; NotFound when it is not quarantined."""
        with self._sessions() as s:
            tenant = s.scalars(select(Tenant).where(Tenant.name == tenant_name)).first()
        if tenant is None or not self._pool.quarantine.release((tenant.id, name, version)):
            raise NotFound(f"no quarantined version {version} of {tenant_name}/{name}")

    def set_batching(
        self, tenant_name: str, name: str, version: int, batching: Mapping[str, Any] | None
    ) -> None:
        """Admin: stores a version's dynamic batching override (None: the server's defaults);
        every replica's lookups of the model are dropped, so the next request batches so."""
        with self._sessions.begin() as s:
            tenant = s.scalars(select(Tenant).where(Tenant.name == tenant_name)).first()
            if tenant is None:
                raise NotFound(f"no tenant {tenant_name!r}")
            owner = Principal(tenant_id=tenant.id, key_id="", is_admin=False)
            row = self._version(self._model(s, owner, name), version)
            row.batching = None if batching is None else json.dumps(dict(batching))
            tenant_id = tenant.id
        self._invalidate(tenant_id, name)

    def _with_quarantine(self, tenant: str, stored: StoredModel) -> StoredModel:
        held = self._pool.quarantine.holds
        versions = tuple(
            dataclasses.replace(v, status=QUARANTINED)
            if held((tenant, stored.name, v.version))
            else v
            for v in stored.versions
        )
        return dataclasses.replace(stored, versions=versions)

    def delete(self, principal: Principal, name: str, version: int | None = None) -> None:
        """Deletes one version, or the whole model; the artifacts stay (content-addressed)."""
        self._refs.collect(self._delete_rows(principal, name, version))
        self._invalidate(principal.tenant_id, name)

    def onnx(self, principal: Principal, name: str, version: int) -> bytes:
        with self._sessions() as s:
            sha = self._version(self._model(s, principal, name), version).onnx_sha256
        return self._artifacts.get(sha)

    def cached_resolve(
        self, principal: Principal, name: str, version: int | None
    ) -> LoadedModel | None:
        """`resolve` from memory alone (no database, no compile, no blocking): None when the
        lookup or the compiled version is not cached. Forbidden for the admin, like resolve."""
        tenant = _tenant_of(principal)
        if self._lookup_ttl_s <= 0:
            return None
        with self._cache_lock:
            found = self._lookups.get((tenant, name, version))
            if found is None or found[2] <= self._clock():
                return None
            loaded, key, _expiry = found
            # Evicted from the LRU: resolve compiles it again rather than keep it alive here.
            return loaded if self._cached_locked(key) is not None else None

    def resolve(self, principal: Principal, name: str, version: int | None) -> LoadedModel:
        """A ready version (default the latest) of the caller's model, compiled and cached."""
        if (cached := self.cached_resolve(principal, name, version)) is not None:
            return cached
        with self._cache_lock:
            generation = (self._epoch, self._writes.get((principal.tenant_id, name), 0))
        with self._sessions() as s:
            model = self._model(s, principal, name)
            row = self._version(model, version) if version is not None else _newest(model)
            if row.status == BLOCKED:
                raise ModelBlocked(
                    f"model {name!r} version {row.version} is blocked by its tenant's policy"
                )
            found = (model.tenant_id, model.name, row.version)
            batching = _batching(row)
            provenance = _provenance(row)
            # The policy is part of the key: the same bytes validated under another tenant's
            # policy are another compiled model (its loop bound and byte caps apply at run time).
            key = (row.program_sha256, row.params_sha256, self._policy_for(model.tenant_id))
        lookup = (model.tenant_id, name, version)
        if (hit := self._cached(key)) is not None:
            return self._settle(
                lookup, LoadedModel(*found, hit, batching, provenance), key, generation
            )
        with self._cache_lock:
            build_lock = self._build_locks.setdefault(key, threading.Lock())
        with build_lock:  # one compile per program, however many requests wait for it
            if (hit := self._cached(key)) is None:
                hit = self._rebuild(*key)
            return self._settle(
                lookup, LoadedModel(*found, hit, batching, provenance), key, generation
            )

    # -- helpers ---------------------------------------------------------------------------

    def loaded(self) -> list[LoadedModel]:
        """The versions resolved recently (their sessions live in the workers), one each."""
        with self._cache_lock:
            found = {(m.tenant_id, m.name, m.version): m for m, _, _ in self._lookups.values()}
        return list(found.values())

    def worker_sessions(self) -> list[WorkerStats]:
        """What each idle worker holds compiled (content key -> bytes, provider)."""
        return self._pool.session_stats()

    def forget_tenant(self, tenant_id: str) -> None:
        """After a tenant's versions changed status (a policy change): drop its cached lookups
        and cache nothing read before now."""
        # NOTE: compiled models stay: they are keyed by content and policy, so a changed policy
        # misses them and another tenant's identical upload may still use them.
        with self._cache_lock:
            for name in {k[1] for k in self._lookups if k[0] == tenant_id}:
                self._writes[(tenant_id, name)] = self._writes.get((tenant_id, name), 0) + 1
            for lookup in [k for k in self._lookups if k[0] == tenant_id]:
                del self._lookups[lookup]

    def _compile(
        self,
        program: bytes,
        params: bytes | None,
        policy: Policy,
        digests: Digests,
        signature: SignatureCheck | None = None,
    ) -> RemoteModel:
        # The one servability check, shared with `graphgate check`: what it passes, upload keeps.
        try:
            return self._pool.compile(
                program, params, policy, self._options, self._source(digests), digests, signature
            )
        except ValidationFailed as failed:
            diagnostics = list(failed.diagnostics)
            raise ModelRejected(_rejected(len(diagnostics)), diagnostics) from None

    def _source(self, digests: Digests) -> Callable[[], tuple[bytes, bytes | None]]:
        """Where a worker that lacks the model reads it again: storage, by content hash."""
        program_sha, params_sha = digests.program, digests.params
        get = self._artifacts.get
        return lambda: (get(program_sha), None if params_sha is None else get(params_sha))

    def _rebuild(self, program_sha: str, params_sha: str | None, policy: Policy) -> RemoteModel:
        # NOTE: re-validated on load, so a stricter validator also applies to stored models.
        program = self._artifacts.get(program_sha)
        params = None if params_sha is None else self._artifacts.get(params_sha)
        return self._compile(program, params, policy, Digests(program_sha, params_sha))

    def _register(
        self,
        tenant: str,
        name: str,
        shas: tuple[str, str | None, str],
        report: str,
        sizes: dict[str, int],
        provenance: str | None = None,
    ) -> int:
        """Adds the version row and its artifact references in one transaction.

        Replicas sharing PostgreSQL race here: the model row and the reference rows are read
        FOR UPDATE, so each upload of a name gets its own version; two first uploads of a name
        (or of the same bytes) both inserting a row collide on its unique key, and the loser
        runs again, finding the winner's row. (SQLite serializes writers by itself.)
        """
        for attempt in range(_REGISTER_TRIES):
            try:
                return self._register_once(tenant, name, shas, report, sizes, provenance)
            except IntegrityError:
                if attempt == _REGISTER_TRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _register_once(
        self,
        tenant: str,
        name: str,
        shas: tuple[str, str | None, str],
        report: str,
        sizes: dict[str, int],
        provenance: str | None,
    ) -> int:
        with self._register_lock, self._sessions.begin() as s:
            # Locks in one order everywhere (references by sha, then the model): no deadlock.
            self._refs.retain(s, tenant, sizes)
            query = select(Model).where(Model.tenant_id == tenant, Model.name == name)
            model = s.scalars(query.with_for_update()).first()
            if model is None:
                model = Model(id=uuid.uuid4().hex, tenant_id=tenant, name=name, next_version=1)
                s.add(model)
            version = model.next_version
            model.next_version = version + 1
            program, params, onnx = shas
            s.add(
                ModelVersion(
                    model=model,
                    version=version,
                    status=READY,
                    program_sha256=program,
                    params_sha256=params,
                    onnx_sha256=onnx,
                    report=report,
                    provenance=provenance,
                )
            )
        return version

    def _delete_rows(self, principal: Principal, name: str, version: int | None) -> list[str]:
        """Deletes the version rows (all of the model's when `version` is None) and their
        artifact references in one transaction; returns the artifacts no row names now."""
        with self._sessions.begin() as s:
            model = self._model(s, principal, name)
            doomed = list(model.versions) if version is None else [self._version(model, version)]
            freed = self._refs.release(s, doomed)
            s.delete(model if version is None else doomed[0])
        return freed

    def sweep_artifacts(self, grace_s: float) -> int:
        """Start-up only: deletes artifacts no version names (a killed upload's, a crash
        between a delete's commit and its file deletions) last stored more than `grace_s` ago
        (younger ones may be another replica's upload in flight); returns how many."""
        return self._refs.sweep(grace_s)

    def _model(self, s: Session, principal: Principal, name: str) -> Model:
        tenant = _tenant_of(principal)
        query = select(Model).where(Model.tenant_id == tenant, Model.name == name)
        model = s.scalars(query).first()
        if model is None:
            raise NotFound(f"no model {name!r}")
        return model

    @staticmethod
    def _version(model: Model, version: int) -> ModelVersion:
        for row in model.versions:
            if row.version == version:
                return row
        raise NotFound(f"model {model.name!r} has no version {version}")

    def _cached(self, key: _CacheKey) -> RemoteModel | None:
        with self._cache_lock:
            return self._cached_locked(key)

    def _cached_locked(self, key: _CacheKey) -> RemoteModel | None:
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)  # eviction pops the least recently used first
        return hit

    def _remember(self, key: _CacheKey, compiled: RemoteModel) -> None:
        with self._cache_lock:
            self._remember_locked(key, compiled)

    def _remember_locked(self, key: _CacheKey, compiled: RemoteModel) -> None:
        self._cache[key] = compiled
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _settle(
        self,
        lookup: _LookupKey,
        loaded: LoadedModel,
        key: _CacheKey,
        generation: tuple[int, int],
    ) -> LoadedModel:
        """Caches a resolved version and its lookup, unless an upload or delete came after the
        database read (then this request is answered with it, and nothing is cached)."""
        expiry = self._clock() + self._lookup_ttl_s
        with self._cache_lock:
            now = (self._epoch, self._writes.get((loaded.tenant_id, loaded.name), 0))
            if generation != now:
                return loaded
            if self._lookup_ttl_s > 0:
                if len(self._lookups) >= _MAX_LOOKUPS:
                    self._lookups.clear()
                self._lookups[lookup] = (loaded, key, expiry)
            self._remember_locked(key, loaded.compiled)
            return loaded

    def _invalidate(self, tenant: str, name: str) -> None:
        """After a committed upload or delete of `name`: forget its lookups, here and (when
        there is a bus) in every other replica."""
        self.drop_lookups(tenant, name)
        if self._publish is not None:
            self._publish({"kind": "model", "tenant": tenant, "name": name})

    def drop_lookups(self, tenant: str | None = None, name: str | None = None) -> None:
        """Forgets the cached lookups of `name` (every lookup when `tenant` is None): another
        replica uploaded or deleted it. Compiled programs stay: they are keyed by content."""
        with self._cache_lock:
            if tenant is None or name is None:
                self._lookups.clear()
                self._epoch += 1
                return
            self._writes[(tenant, name)] = self._writes.get((tenant, name), 0) + 1
            for key in [k for k in self._lookups if k[:2] == (tenant, name)]:
                del self._lookups[key]


def _sizes(
    shas: tuple[str, str | None, str], blobs: tuple[bytes, bytes | None, bytes]
) -> dict[str, int]:
    pairs = zip(shas, blobs, strict=True)
    return {sha: len(blob) for sha, blob in pairs if sha is not None and blob is not None}


def _tenant_of(principal: Principal) -> str:
    if principal.is_admin or not principal.tenant_id:
        raise Forbidden("models belong to tenants: use a tenant key")
    return principal.tenant_id


def _check_name(name: str) -> None:
    check_name("model", name)


def _rejected(count: int) -> str:
    return f"the program is rejected with {count} error{'s' if count != 1 else ''}"


def _newest(model: Model) -> ModelVersion:
    # A blocked newest version is answered as blocked (409), not skipped for an older one.
    servable = [v for v in model.versions if v.status in (READY, BLOCKED)]
    if not servable:
        raise NotFound(f"model {model.name!r} has no ready version")
    return servable[-1]


def _stored(model: Model) -> StoredModel:
    versions = tuple(map(_stored_version, model.versions))
    ready = [v for v in versions if v.status == READY]
    return StoredModel(model.name, versions, ready[-1] if ready else None)


def _stored_version(row: ModelVersion) -> StoredVersion:
    return StoredVersion(
        version=row.version,
        status=row.status,
        created=row.created,
        program_sha256=row.program_sha256,
        params_sha256=row.params_sha256,
        onnx_sha256=row.onnx_sha256,
        report=json.loads(row.report),
        batching=_batching(row),
        provenance=_provenance(row),
    )


def _provenance(row: ModelVersion) -> dict[str, Any] | None:
    return None if row.provenance is None else dict(json.loads(row.provenance))


def _batching(row: ModelVersion) -> dict[str, Any] | None:
    return None if row.batching is None else dict(json.loads(row.batching))
