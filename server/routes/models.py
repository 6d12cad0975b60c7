"""The tenant model API under /v1: upload, check, list, get, delete, download ONNX."""

from __future__ import annotations

import json
from typing import Annotated, Any, Final

from fastapi import APIRouter, File, Form, Request, Response, UploadFile, status

from server.deps import MetricsDep, ModelsDep, PrincipalDep
from server.deps_admin import ActorDep, UploadsDep
from server.paths import CHECK, MODELS, V1
from server.routes.json import iso
from server.routes.schemas import ERRORS, UPLOAD_ERRORS
from server.services.limits import CompileQueue
from server.services.types import StoredModel, StoredVersion

router = APIRouter(prefix=V1, tags=["models"], responses=ERRORS)
JSON: Final = "application/json"
ProgramPart = Annotated[UploadFile, File(description="The .pdmodel (ProgramDesc) bytes.")]
ParamsPart = Annotated[UploadFile | None, File(description="The .pdiparams bytes.")]


# NOTE: `async def` routes: validation and compilation are CPU-bound, so they run in the compile
# queue's own pool (server/services/limits.py), under the tenant's compile cap; the shared
# threadpool, and so every other route, never waits behind them. The answer is serialised there
# too: a report of a few thousand ops took the event loop (and every tenant's requests) for
# hundreds of milliseconds when FastAPI encoded it (benchmarks/results/fairness.md).
@router.post(
    MODELS, status_code=status.HTTP_201_CREATED, response_class=Response, responses=UPLOAD_ERRORS
)
async def upload_model(
    request: Request,
    principal: PrincipalDep,
    uploads: UploadsDep,
    actor: ActorDep,
    metrics: MetricsDep,
    name: Annotated[str, Form()],
    program: ProgramPart,
    params: ParamsPart = None,
) -> Response:
    program_bytes, params_bytes = await program.read(), await _read(params)

    def upload() -> bytes:
        uploaded = uploads.upload(principal, actor, name, program_bytes, params_bytes)
        return _json_bytes(
            {
                "name": uploaded.name,
                "version": uploaded.version,
                "status": uploaded.status,
                "report": uploaded.report.to_json(),
            }
        )

    with metrics.upload(principal.tenant_id):
        content = await _compiles(request).run(principal.tenant_id or "", upload)
    return Response(content, status.HTTP_201_CREATED, media_type=JSON)


@router.post(CHECK, response_class=Response, responses=UPLOAD_ERRORS)
async def check_model(
    request: Request,
    principal: PrincipalDep,
    uploads: UploadsDep,
    actor: ActorDep,
    program: ProgramPart,
    params: ParamsPart = None,
) -> Response:
    program_bytes, params_bytes = await program.read(), await _read(params)

    def check() -> bytes:
        report = uploads.check(principal, actor.tenant, program_bytes, params_bytes)
        return _json_bytes({"valid": True, "report": report.to_json()})

    content = await _compiles(request).run(principal.tenant_id or "", check)
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


async def _read(part: UploadFile | None) -> bytes | None:
    return None if part is None else await part.read()


def _json_bytes(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _compiles(request: Request) -> CompileQueue:
    compiles: CompileQueue = request.app.state.limits.compiles
    return compiles


def _latest_json(model: StoredModel) -> dict[str, Any]:
    latest = model.latest
    if latest is None:
        return {"latest_version": None, "signature": None}
    signature = {"inputs": latest.report["inputs"], "outputs": latest.report["outputs"]}
    return {"latest_version": latest.version, "signature": signature}


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
    }
