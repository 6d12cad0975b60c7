"""The tenant model API under /v1: upload, check, list, get, delete, download ONNX."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from fastapi import APIRouter, Request, Response, status
from starlette.datastructures import UploadFile

from server.dispatch.signing import Provenance
from server.errors import BadRequest
from server.http.admin_deps import ActorDep, UploadsDep, get_actor
from server.http.deps import MetricsDep, ModelsDep, PrincipalDep
from server.http.paths import CHECK, MODELS, V1
from server.http.upload_form import UploadForm, read_upload_form, spooled
from server.routes.json import iso
from server.routes.schemas import ERRORS, UPLOAD_ERRORS
from server.services.limits import CompileQueue
from server.services.signing_policy import SignatureFile
from server.services.types import StoredModel, StoredVersion
from server.storage.spool import Spool, Spooled

router = APIRouter(prefix=V1, tags=["models"], responses=ERRORS)
JSON: Final = "application/json"
_FILE: Final = {"type": "string", "format": "binary"}
_PROGRAM: Final = {**_FILE, "description": "The .pdmodel (ProgramDesc) bytes."}
_PARAMS: Final = {**_FILE, "description": "The .pdiparams bytes."}
_SIGNATURE: Final = {
    **_FILE,
    "description": "An OpenSSF Model Signing bundle (`model_signing sign key|certificate`) over "
    "the program and params, by the file names they are uploaded under.",
}
_DIMS: Final = {
    "type": "string",
    "example": "D1=128,audio_chunk_lens.0=32",
    "description": "NAME=SIZE[,NAME=SIZE...]: the most each named unknown input dim takes (a "
    "symbol as the report names it, D1, D2, ..., or INPUT.AXIS), as `graphgate check --dim`. "
    "Every budget is computed at these bounds and every request is checked against them; "
    "stored with the version. Bad syntax: 400 INVALID_DIMS; a name that is no unknown dim, "
    "the batch, or a size outside 1..max_dim: 422 DIM_DECLARATION_REFUSED.",
}


def _multipart(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its multipart form itself."""
    schema = {"type": "object", "required": required, "properties": properties}
    return {
        "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}
    }


@dataclass(frozen=True, slots=True)
class _Upload:
    program: Spooled
    params: Spooled | None
    files: UploadForm  # the spool files, removed by whoever holds them last
    name: str = ""
    signature: SignatureFile | None = None
    dims: str = ""  # the `dims` field as sent; the service reads it (validator/dims.py)


# NOTE: `async def` routes that read their form themselves (no `File`/`Form` parameters): FastAPI
# reads and parses a declared form before it even authenticates, so each refused check of a
# 3,000-op program cost a multipart parse on the event loop, thousands a second under one
# tenant's flood (benchmarks/results/fairness.md). Here the key, the rate and the tenant's
# compile slot come first (the audit actor after them); a refusal reads no body (uvicorn drains
# the unread bytes, and the connection stays usable: tests/server/test_check_refusal.py). A body
# still streaming holds its tenant's own slot, not a place among all tenants' (CompileQueue).
# Validation and compilation are CPU-bound: they run in the compile queue's own pool
# (server/services/limits.py), under the slot; the shared threadpool, and so every other route,
# never waits behind them. The answer is serialised there too: a report of a few thousand ops
# took the event loop for hundreds of milliseconds when FastAPI encoded it.
@router.post(
    MODELS,
    status_code=status.HTTP_201_CREATED,
    response_class=Response,
    responses=UPLOAD_ERRORS,
    openapi_extra=_multipart(
        ["name", "program"],
        {
            "name": {"type": "string"},
            "program": _PROGRAM,
            "params": _PARAMS,
            "signature": _SIGNATURE,
            "dims": _DIMS,
        },
    ),
)
async def upload_model(
    request: Request,
    principal: PrincipalDep,
    uploads: UploadsDep,
    metrics: MetricsDep,
) -> Response:
    compiles = _compiles(request)
    with compiles.admitted(principal.tenant_id or "") as admission:
        actor = await get_actor(request, principal)
        form = await _read_form(request, named=True)

        def upload() -> bytes:
            if not form.files.take():
                return b""  # given up before it ran: nobody reads this
            try:
                uploaded = uploads.upload(
                    principal,
                    actor,
                    form.name,
                    form.program,
                    form.params,
                    form.signature,
                    form.dims,
                )
            finally:
                form.files.discard()
            return _json_bytes(
                {
                    "name": uploaded.name,
                    "version": uploaded.version,
                    "status": uploaded.status,
                    "report": uploaded.report.to_json(),
                    "provenance": _provenance_json(uploaded.provenance),
                }
            )

        with metrics.upload(principal.tenant_id), _spooled_until_taken(form):
            content = await admission.run(upload)
    return Response(content, status.HTTP_201_CREATED, media_type=JSON)


@router.post(
    CHECK,
    response_class=Response,
    responses=UPLOAD_ERRORS,
    openapi_extra=_multipart(
        ["program"],
        {"program": _PROGRAM, "params": _PARAMS, "signature": _SIGNATURE, "dims": _DIMS},
    ),
)
async def check_model(request: Request, principal: PrincipalDep, uploads: UploadsDep) -> Response:
    compiles = _compiles(request)
    with compiles.admitted(principal.tenant_id or "") as admission:
        actor = await get_actor(request, principal)
        form = await _read_form(request, named=False)

        def check() -> bytes:
            if not form.files.take():
                return b""  # given up before it ran: nobody reads this
            try:
                checked = uploads.check(
                    principal, actor.tenant, form.program, form.params, form.signature, form.dims
                )
            finally:
                form.files.discard()
            return _json_bytes(
                {
                    "valid": True,
                    "report": checked.report.to_json(),
                    "provenance": _provenance_json(checked.provenance),
                }
            )

        with _spooled_until_taken(form):
            content = await admission.run(check)
    return Response(content, media_type=JSON)


@router.get("/models")
def list_models(principal: PrincipalDep, models: ModelsDep) -> dict[str, Any]:
    models_json = [
        {"name": m.name, "versions": [v.version for v in m.versions], **_latest_json(m)}
        for m in models.list_models(principal)
    ]
    return {"models": models_json}


@router.get("/models/{name}")
def get_model(name: str, principal: PrincipalDep, models: ModelsDep) -> dict[str, Any]:
    model = models.get_model(principal, name)
    versions = [_version_json(v) for v in model.versions]
    return {"name": model.name, **_latest_json(model), "versions": versions}


@router.delete("/models/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_model(name: str, principal: PrincipalDep, uploads: UploadsDep, actor: ActorDep) -> None:
    uploads.delete(principal, actor, name, None)


@router.delete("/models/{name}/versions/{version}", status_code=status.HTTP_204_NO_CONTENT)
def delete_version(
    name: str, version: int, principal: PrincipalDep, uploads: UploadsDep, actor: ActorDep
) -> None:
    uploads.delete(principal, actor, name, version)


@router.get("/models/{name}/versions/{version}/onnx")
def download_onnx(name: str, version: int, principal: PrincipalDep, models: ModelsDep) -> Response:
    data = models.onnx(principal, name, version)
    disposition = f'attachment; filename="{name}-{version}.onnx"'
    return Response(
        data, media_type="application/octet-stream", headers={"Content-Disposition": disposition}
    )


async def _read_form(request: Request, *, named: bool) -> _Upload:
    """The form's `program`, optional `params`, `signature` and `dims` and, when `named`, `name`;
    a missing or mistyped part is 400 BAD_REQUEST (a malformed body: Starlette's 400). The
    files are in the spool, hashed as they streamed (server/http/upload_form.py)."""
    # capped by server/http/body_limit.py as it streams
    form = await read_upload_form(request, _spool(request))
    try:
        program_part, params_part = form.get("program"), form.get("params")
        program = _file(program_part, "program")
        if program is None:
            raise BadRequest("expected a form part 'program' (the .pdmodel file), got none")
        params = _file(params_part, "params")
        # Read whole (the body cap bounds it): the service refuses it by size.
        bundle = _file(form.get("signature"), "signature")
        signature = None
        if bundle is not None:  # the files are matched to the signed ones by these names
            params_name = None if params is None else _filename(params_part)
            signature = SignatureFile(bundle.read(), _filename(program_part), params_name)
        name = _name(form.get("name")) if named else ""
        dims = _text(form.get("dims"), "dims")
        return _Upload(program, params, form, name, signature, dims)
    except BaseException:
        form.discard()
        raise


@contextmanager
def _spooled_until_taken(form: _Upload) -> Iterator[None]:
    """Removes the upload's spool files if the request is given up (the client left, the
    server is full) before the thread that uploads it took them."""
    try:
        yield
    finally:
        form.files.discard_unless_taken()


def _file(part: UploadFile | str | None, what: str) -> Spooled | None:
    if part is None or part == "":  # an empty text field is an absent part, as FastAPI had it
        return None
    if isinstance(part, str):
        raise BadRequest(f"expected form part {what!r} as a file, got a text field")
    return spooled(part)


def _spool(request: Request) -> Spool:
    spool: Spool = request.app.state.spool
    return spool


def _filename(part: UploadFile | str | None) -> str:
    """The name a file part was sent under (a signature lists the files by these)."""
    return (part.filename or "") if isinstance(part, UploadFile) else ""


def _text(part: UploadFile | str | None, what: str) -> str:
    """An optional text field ("" when absent)."""
    if part is None:
        return ""
    if not isinstance(part, str):
        raise BadRequest(f"expected form field {what!r} as text, got a file")
    return part


def _name(part: UploadFile | str | None) -> str:
    if part is None or part == "":
        raise BadRequest("expected a form field 'name' (the model's name), got none")
    if not isinstance(part, str):
        raise BadRequest("expected form field 'name' as text, got a file")
    return part


def _json_bytes(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _compiles(request: Request) -> CompileQueue:
    compiles: CompileQueue = request.app.state.limits.compiles
    return compiles


def _latest_json(model: StoredModel) -> dict[str, Any]:
    latest = model.latest
    if latest is None:
        return {"latest_version": None, "signature": None, "provenance": None}
    signature = {"inputs": latest.report["inputs"], "outputs": latest.report["outputs"]}
    return {"latest_version": latest.version, "signature": signature, **_signed(latest)}


def _signed(version: StoredVersion) -> dict[str, Any]:
    """Who signed a version (null: it came unsigned)."""
    return {"provenance": None if version.provenance is None else dict(version.provenance)}


def _provenance_json(provenance: Provenance | None) -> dict[str, str] | None:
    return None if provenance is None else provenance.to_json()


def _version_json(version: StoredVersion) -> dict[str, Any]:
    return {
        "version": version.version,
        "status": version.status,
        "created": iso(version.created),
        "sha256": {
            "program": version.program_sha256,
            "params": version.params_sha256,
            "onnx": version.onnx_sha256,
        },
        "report": version.report,
        "batching": version.batching,  # the admin's override; null: the server's defaults
        "dims": version.dims,  # the upload's declared dims; null: none declared
        **_signed(version),
    }
