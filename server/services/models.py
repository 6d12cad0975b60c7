"""Model use cases: upload (validate, compile, store), list, get, delete, download, resolve."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from executor import SessionOptions
from server.db.models import Model, ModelCrash, ModelVersion, Tenant

# NOTE: compiled in a worker process (server/dispatch): the server holds its signature only.
from server.dispatch import (
    Blob,
    Digests,
    PoolSettings,
    RemoteModel,
    WorkerPool,
    WorkerStats,
    size_of,
)
from server.dispatch.pool import KeyedLocks, LoadQueue, declared, in_place
from server.dispatch.signing import SignatureCheck
from server.dispatch.worker import DeclaredDims
from server.errors import (
    Forbidden,
    ModelBlocked,
    ModelQuarantined,
    ModelRejected,
    NotFound,
    QuotaExceeded,
)
from server.services.artifact_refs import ArtifactRefs
from server.services.limits import StorageQuotaExceeded
from server.services.types import (
    CheckedModel,
    LoadedModel,
    Principal,
    RegistrationRules,
    StoredModel,
    StoredVersion,
    UploadedModel,
    check_name,
)
from server.storage import ArtifactStore, StorageUnavailable
from server.storage.spool import Spool, Spooled, temporary_spool
from validator import DEFAULT_POLICY, Policy, ValidationFailed

READY: Final = "ready"
QUARANTINED: Final = "quarantined"  # crashed its workers; an admin may release it
BLOCKED: Final = "blocked"  # no longer passes its tenant's policy: kept, not served

# Compiled sessions are keyed by their artifacts' content (program and params sha256), never by
# tenant/name/version: a version deleted and uploaded again with other bytes (by any replica)
# can never be answered by the old graph, and identical uploads share one session.
# program, params, the policy it was checked with, the upload's declared dims
_CacheKey = tuple[str, str | None, Policy, DeclaredDims]
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
        rules_for_update: Callable[[Session, str], RegistrationRules] | None = None,
        compile_queue: LoadQueue | None = None,
        spool: Spool | None = None,
    ) -> None:
        self._sessions = sessions
        # Where a compile's ONNX is written by the worker, to be hashed and stored from.
        self._spool = spool or temporary_spool()
        # Where a model left the cache is compiled again (here, or in a worker that lacks
        # it): the tenant's turn in the compile queue, under its compile cap
        # (CompileQueue.run_blocking); in place without one.
        self._compile_queue: LoadQueue = compile_queue or in_place
        self._artifacts = artifacts
        # The tenant's storage quota in bytes (0: none), checked where the artifact references
        # are counted, in the transaction that adds the version (shared artifacts count once).
        self._refs = ArtifactRefs(sessions, artifacts, storage_quota_for or (lambda _tenant: 0))
        self._policy = policy
        # The tenant's own policy (server/services/policies.py); `policy` for every tenant without.
        self._policy_for = policy_for or (lambda _tenant: policy)
        # The tenant's committed policy and quotas, its row locked in the caller's transaction
        # (server/services/policies.py): what a version registers against.
        self._rules_for_update = rules_for_update or (
            lambda _s, tenant: RegistrationRules(self._policy_for(tenant))
        )
        self._options = options or SessionOptions()
        self._pool = pool or WorkerPool(PoolSettings(workers=1))
        self._pool.queue_loads(self._compile_queue)
        self._cache_size = cache_size
        self._cache: OrderedDict[_CacheKey, RemoteModel] = OrderedDict()
        self._owners: dict[_CacheKey, str] = {}  # the tenant that last used each entry
        self._cache_lock = threading.Lock()
        self._build_locks = KeyedLocks()
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
        program: Blob,
        params: Blob | None,
        tenant_id: str = "",
        signature: SignatureCheck | None = None,
        dims: Mapping[str, int] | None = None,
    ) -> CheckedModel:
        """Verifies the signature when there is one, then validates (with the tenant's policy
        when given, at the declared `dims`), lowers and gates without storing anything;
        returns the report."""
        policy = self._policy_for(tenant_id) if tenant_id else self._policy
        digests = Digests.of(program, params)
        compiled = self._compile(
            program, params, policy, digests, signature, owner=tenant_id, dims=declared(dims)
        )
        return CheckedModel(compiled.program.report, compiled.provenance)

    def upload(
        self,
        principal: Principal,
        name: str,
        program: Blob,
        params: Blob | None,
        digests: Digests | None = None,
        signature: SignatureCheck | None = None,
        dims: Mapping[str, int] | None = None,
    ) -> UploadedModel:
        """Adds a version of `name`: artifacts first, the database row last (crash-safe).
        `program`, `params`: bytes, or spool files hashed as they were written (the HTTP
        upload's: then no byte of them is read into this process); `digests`: the caller's
        hashes of them (else computed here, once); `signature`: verified in the worker before
        anything else, its signer kept; `dims`: the upload's declared dims, kept with the
        version and validated at on every compile. The program and params are stored while the
        worker compiles; a refused upload removes what it stored (what no version names)."""
        tenant = _tenant_of(principal)
        _check_name(name)
        policy = self._policy_for(tenant)
        digests = digests or Digests.of(program, params)
        bounds = declared(dims)
        inputs = [(digests.program, program)]
        if params is not None and digests.params is not None:
            inputs.append((digests.params, params))
        onnx_path = self._spool.new_path()
        try:
            compiled, onnx = self._compile_storing(
                inputs, params, policy, digests, signature, onnx_path, tenant, bounds
            )
            report = compiled.program.report
            provenance = compiled.provenance
            blobs = [*inputs, (onnx.sha256, onnx)]
            sizes = {sha: size_of(blob) for sha, blob in blobs}
            shas = (digests.program, digests.params, onnx.sha256)
            try:
                signed = None if provenance is None else json.dumps(provenance.to_json())
                version, status = self._register(
                    tenant, name, shas, json.dumps(report.to_json()), sizes, policy, signed, bounds
                )
            except (StorageQuotaExceeded, QuotaExceeded):
                self._refs.collect(list(sizes))  # what this upload stored and nothing else names
                raise
            self._refs.keep_stored(blobs, self._put)
        finally:
            onnx_path.unlink(missing_ok=True)  # stored: the artifact is its own link or copy
        self._remember((shas[0], shas[1], policy, bounds), compiled, tenant)
        if status == BLOCKED:
            status = self._revalidate(tenant, name, version, program, params, digests, bounds)
        self._invalidate(tenant, name)  # "latest" is the new version from now on
        return UploadedModel(name, version, status, report, provenance)

    def _compile_storing(
        self,
        inputs: list[tuple[str, Blob]],
        params: Blob | None,
        policy: Policy,
        digests: Digests,
        signature: SignatureCheck | None,
        onnx_path: Path,
        owner: str,
        dims: DeclaredDims,
    ) -> tuple[RemoteModel, Spooled]:
        """Compiles (the worker writes the ONNX to `onnx_path`) while a thread stores the
        program and params; then stores the ONNX, hashed once from its file. Whatever fails,
        what this stored and no version names is removed before the error goes on: a refused
        upload leaves nothing in the store."""
        program = inputs[0][1]
        storing = _in_thread(lambda: self._put_all(inputs))
        stored = [sha for sha, _ in inputs]
        try:
            compiled = self._compile(
                program, params, policy, digests, signature, owner, dims, onnx_path
            )
            storing.result()
            onnx = self._spool.hashed(onnx_path)
            stored.append(onnx.sha256)
            self._put(onnx.sha256, onnx)
        except BaseException:
            wait([storing])
            self._forget_stored(stored)
            raise
        return compiled, onnx

    def _put_all(self, blobs: list[tuple[str, Blob]]) -> None:
        for sha, blob in blobs:
            self._put(sha, blob)

    def _put(self, sha: str, blob: Blob) -> None:
        if isinstance(blob, Spooled):
            self._artifacts.put_file(blob.path, sha)
        else:
            self._artifacts.put(blob, sha)

    def _forget_stored(self, shas: list[str]) -> None:
        """Removes what a refused upload stored and no version names (an unreachable store
        keeps them: the start-up sweep removes them later)."""
        with contextlib.suppress(StorageUnavailable):
            self._refs.collect(shas)

    def _revalidate(
        self,
        tenant: str,
        name: str,
        version: int,
        program: Blob,
        params: Blob | None,
        digests: Digests,
        dims: DeclaredDims = (),
    ) -> str:
        """A version registered blocked (its tenant's policy changed while it compiled) is
        validated again, in a worker, under the policy now in force; it is unblocked only if
        it passes and that policy is still the tenant's when the status is written."""
        policy = self._policy_for(tenant)
        try:
            compiled = self._compile(program, params, policy, digests, owner=tenant, dims=dims)
        except ModelRejected:
            return BLOCKED
        with self._register_lock, self._sessions.begin() as s:
            rules = self._rules_for_update(s, tenant)
            row = s.scalars(
                select(ModelVersion)
                .join(Model)
                .where(Model.tenant_id == tenant, Model.name == name)
                .where(ModelVersion.version == version)
            ).first()
            if row is None or row.status != BLOCKED or rules.policy != policy:
                return BLOCKED if row is None else row.status
            row.status = READY
        self._remember((digests.program, digests.params, policy, dims), compiled, tenant)
        return READY

    def list_models(self, principal: Principal) -> list[StoredModel]:
        tenant = _tenant_of(principal)
        with self._sessions() as s:
            rows = s.scalars(select(Model).where(Model.tenant_id == tenant).order_by(Model.name))
            return [_stored(m) for m in rows]

    def get_model(self, principal: Principal, name: str) -> StoredModel:
        with self._sessions() as s:
            return _stored(self._model(s, principal, name))

    def release_in(self, s: Session, tenant_name: str, name: str, version: int) -> str:
        """Admin, in the caller's transaction: lets a quarantined version run again (its crash
        count starts over); NotFound when it is not quarantined. Returns the tenant's id (call
        `after_admin_write` once committed)."""
        row = self._admin_version(s, tenant_name, name, version)
        if row.status != QUARANTINED:
            raise NotFound(f"no quarantined version {version} of {tenant_name}/{name}")
        row.status = READY
        tenant_id = row.model.tenant_id
        s.execute(
            delete(ModelCrash).where(
                ModelCrash.tenant_id == tenant_id,
                ModelCrash.model == name,
                ModelCrash.version == version,
            )
        )
        return tenant_id

    def set_batching_in(
        self,
        s: Session,
        tenant_name: str,
        name: str,
        version: int,
        batching: Mapping[str, Any] | None,
    ) -> str:
        """Admin, in the caller's transaction: stores a version's dynamic batching override
        (None: the server's defaults). Returns the tenant's id: once committed,
        `after_admin_write` drops every replica's lookups of the model, so the next request
        batches so."""
        row = self._admin_version(s, tenant_name, name, version)
        row.batching = None if batching is None else json.dumps(dict(batching))
        return row.model.tenant_id

    def delete_in(
        self, s: Session, tenant_name: str, name: str, version: int | None
    ) -> tuple[str, list[str]]:
        """Admin, in the caller's transaction: `delete` of a tenant's model. Returns the
        tenant's id and the artifacts no row names now (for `after_admin_delete`)."""
        check_name("model", name)
        owner = Principal(tenant_id=_tenant_row(s, tenant_name).id, key_id="", is_admin=False)
        return owner.tenant_id, self._delete_rows_in(s, owner, name, version)

    def has_versions(self, tenant_id: str, name: str) -> bool:
        """Whether the tenant's model `name` still has a stored version."""
        with self._sessions() as s:
            query = select(ModelVersion.id).join(Model)
            query = query.where(Model.tenant_id == tenant_id, Model.name == name)
            return s.scalars(query.limit(1)).first() is not None

    def after_admin_write(self, tenant_id: str, name: str) -> None:
        self._invalidate(tenant_id, name)

    def after_admin_delete(self, tenant_id: str, name: str, freed: list[str]) -> None:
        self._refs.collect(freed)
        self._invalidate(tenant_id, name)

    def _admin_version(self, s: Session, tenant_name: str, name: str, version: int) -> ModelVersion:
        check_name("model", name)
        owner = Principal(tenant_id=_tenant_row(s, tenant_name).id, key_id="", is_admin=False)
        return self._version(self._model(s, owner, name), version)

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
            if row.status == QUARANTINED:
                raise ModelQuarantined(
                    f"model {name!r} version {row.version} crashed its workers repeatedly and "
                    "is quarantined until an admin releases it"
                )
            found = (model.tenant_id, model.name, row.version)
            batching = _batching(row)
            provenance = _provenance(row)
            # The policy is part of the key: the same bytes validated under another tenant's
            # policy are another compiled model (its loop bound and byte caps apply at run time).
            policy = self._policy_for(model.tenant_id)
            key = (row.program_sha256, row.params_sha256, policy, _declared_dims(row))
        lookup = (model.tenant_id, name, version)
        if (hit := self._cached(key)) is not None:
            return self._settle(
                lookup, LoadedModel(*found, hit, batching, provenance), key, generation
            )
        with self._build_locks.held(key):  # one compile per program, however many wait for it
            if (hit := self._cached(key)) is None:
                hit = self._compile_queue(
                    model.tenant_id, lambda: self._rebuild(*key, owner=model.tenant_id)
                )
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
        program: Blob,
        params: Blob | None,
        policy: Policy,
        digests: Digests,
        signature: SignatureCheck | None = None,
        owner: str = "",
        dims: DeclaredDims = (),
        onnx_to: Path | None = None,
    ) -> RemoteModel:
        """`owner`: the tenant it is compiled for (whose share of the worker's cache it takes)."""
        # The one servability check, shared with `graphgate check`: what it passes, upload keeps.
        source = self._source(digests)
        try:
            return self._pool.compile(
                program,
                params,
                policy,
                self._options,
                source,
                digests,
                signature,
                owner,
                dims,
                onnx_to,
            )
        except ValidationFailed as failed:
            diagnostics = list(failed.diagnostics)
            raise ModelRejected(_rejected(len(diagnostics)), diagnostics) from None

    def _source(self, digests: Digests) -> Callable[[], tuple[bytes, bytes | None]]:
        """Where a worker that lacks the model reads it again: storage, by content hash."""
        program_sha, params_sha = digests.program, digests.params
        get = self._artifacts.get
        return lambda: (get(program_sha), None if params_sha is None else get(params_sha))

    def _rebuild(
        self,
        program_sha: str,
        params_sha: str | None,
        policy: Policy,
        dims: DeclaredDims,
        owner: str,
    ) -> RemoteModel:
        # NOTE: re-validated on load, so a stricter validator also applies to stored models.
        program = self._artifacts.get(program_sha)
        params = None if params_sha is None else self._artifacts.get(params_sha)
        digests = Digests(program_sha, params_sha)
        return self._compile(program, params, policy, digests, owner=owner, dims=dims)

    def _register(
        self,
        tenant: str,
        name: str,
        shas: tuple[str, str | None, str],
        report: str,
        sizes: dict[str, int],
        policy: Policy,
        provenance: str | None = None,
        dims: DeclaredDims = (),
    ) -> tuple[int, str]:
        """Adds the version row and its artifact references in one transaction; returns its
        number and status.

        Replicas sharing PostgreSQL race here: the tenant row, then the reference rows and the
        model row are read FOR UPDATE, so each upload of a name gets its own version and the
        tenant's quotas are counted by one upload at a time; two first uploads of a name (or
        of the same bytes) both inserting a row collide on its unique key, and the loser runs
        again, finding the winner's row. (SQLite serializes writers by itself.)
        """
        for attempt in range(_REGISTER_TRIES):
            try:
                return self._register_once(
                    tenant, name, shas, report, sizes, policy, provenance, dims
                )
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
        policy: Policy,
        provenance: str | None,
        dims: DeclaredDims,
    ) -> tuple[int, str]:
        with self._register_lock, self._sessions.begin() as s:
            # Locks in one order everywhere (the tenant, references by sha, then the model): no
            # deadlock. The tenant's lock is the one a policy or quota write takes too.
            rules = self._rules_for_update(s, tenant)
            query = select(Model).where(Model.tenant_id == tenant, Model.name == name)
            exists = s.scalars(query).first() is not None
            _check_counts(s, tenant, rules, new_model=not exists)
            self._refs.retain(s, tenant, sizes, rules.max_storage_bytes)
            model = s.scalars(query.with_for_update()).first()
            if model is None:
                model = Model(id=uuid.uuid4().hex, tenant_id=tenant, name=name, next_version=1)
                s.add(model)
            version = model.next_version
            model.next_version = version + 1
            program, params, onnx = shas
            # Validated under another policy than the tenant's now (an operator changed it
            # during the compile): kept blocked until validated again (`_revalidate`).
            status = READY if rules.policy == policy else BLOCKED
            s.add(
                ModelVersion(
                    model=model,
                    version=version,
                    status=status,
                    program_sha256=program,
                    params_sha256=params,
                    onnx_sha256=onnx,
                    report=report,
                    provenance=provenance,
                    dims=json.dumps(dict(dims)) if dims else None,
                )
            )
        return version, status

    def _delete_rows(self, principal: Principal, name: str, version: int | None) -> list[str]:
        with self._sessions.begin() as s:
            return self._delete_rows_in(s, principal, name, version)

    def _delete_rows_in(
        self, s: Session, principal: Principal, name: str, version: int | None
    ) -> list[str]:
        """Deletes the version rows (all of the model's when `version` is None) and their
        artifact references in the caller's transaction; returns the artifacts no row names
        now (to collect once committed)."""
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

    def _remember(self, key: _CacheKey, compiled: RemoteModel, tenant: str) -> None:
        with self._cache_lock:
            self._remember_locked(key, compiled, tenant)

    def _remember_locked(self, key: _CacheKey, compiled: RemoteModel, tenant: str) -> None:
        self._cache[key] = compiled
        self._cache.move_to_end(key)
        self._owners[key] = tenant
        while len(self._cache) > self._cache_size:
            victim = _evictee(self._cache, self._owners, tenant, self._cache_size)
            del self._cache[victim]
            del self._owners[victim]

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
            self._remember_locked(key, loaded.compiled, loaded.tenant_id)
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


def _check_counts(s: Session, tenant: str, rules: RegistrationRules, *, new_model: bool) -> None:
    """QuotaExceeded when one more version (of a new model, with `new_model`) is over the
    tenant's quota of models or of stored versions, counted in the registering transaction."""
    if rules.max_models and new_model:
        models = (
            s.scalar(select(func.count()).select_from(Model).where(Model.tenant_id == tenant)) or 0
        )
        if models >= rules.max_models:
            raise QuotaExceeded(
                f"quota max_models: expected at most {rules.max_models} models, got {models + 1}"
            )
    if rules.max_versions:
        versions = (
            s.scalar(
                select(func.count())
                .select_from(ModelVersion)
                .join(Model)
                .where(Model.tenant_id == tenant)
            )
            or 0
        )
        if versions >= rules.max_versions:
            raise QuotaExceeded(
                f"quota max_versions: expected at most {rules.max_versions} stored versions, "
                f"got {versions + 1}"
            )


def _tenant_row(s: Session, name: str) -> Tenant:
    check_name("tenant", name)
    tenant = s.scalars(select(Tenant).where(Tenant.name == name)).first()
    if tenant is None:
        raise NotFound(f"no tenant {name!r}")
    return tenant


T = TypeVar("T")


def _in_thread(work: Callable[[], T]) -> Future[T]:
    """`work()` started in a thread of its own; its outcome (result or error) in the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as error:  # handed to whoever asks for the result
            future.set_exception(error)

    threading.Thread(target=run, name="graphgate-store", daemon=True).start()
    return future


def _evictee(
    cache: OrderedDict[_CacheKey, RemoteModel],
    owners: Mapping[_CacheKey, str],
    tenant: str,
    size: int,
) -> _CacheKey:
    """Which entry leaves a full cache as `tenant` adds one: each tenant in it has an equal
    share of its places; a tenant over its share loses its own least recently used model
    first, so one tenant cycling many models evicts its own, never another's within its share.
    Within the shares, the least recently used of the tenant holding the most."""
    held: dict[str, int] = {}
    for key in cache:
        held[owners[key]] = held.get(owners[key], 0) + 1
    share = max(1, size // len(held))
    loser = tenant if held.get(tenant, 0) > share else max(held, key=held.__getitem__)
    return next(key for key in cache if owners[key] == loser)


def _declared_dims(row: ModelVersion) -> DeclaredDims:
    """The dims the version's upload declared, as its compiled model's key has them."""
    return declared(json.loads(row.dims)) if row.dims else ()


def _tenant_of(principal: Principal) -> str:
    if principal.is_admin or not principal.tenant_id:
        raise Forbidden("models belong to tenants: use a tenant key")
    return principal.tenant_id


def _check_name(name: str) -> None:
    check_name("model", name)


def _rejected(count: int) -> str:
    return f"the program is rejected with {count} error{'s' if count != 1 else ''}"


def _newest(model: Model) -> ModelVersion:
    # A blocked or quarantined newest version is answered so (409, 503), not skipped for an
    # older one.
    servable = [v for v in model.versions if v.status in (READY, BLOCKED, QUARANTINED)]
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
        dims=dict(_declared_dims(row)) or None,
    )


def _provenance(row: ModelVersion) -> dict[str, Any] | None:
    return None if row.provenance is None else dict(json.loads(row.provenance))


def _batching(row: ModelVersion) -> dict[str, Any] | None:
    return None if row.batching is None else dict(json.loads(row.batching))
