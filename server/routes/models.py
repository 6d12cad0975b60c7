"""The tenant model API under /v1: upload, check, list, get, delete, download ONNX."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Response, UploadFile, status

from server.deps import MetricsDep, ModelsDep, PrincipalDep
from server.paths import CHECK, MODELS, V1

router = APIRouter(prefix=V1, tags=["models"])
ProgramPart = Annotated[UploadFile, File(description="The .pdmodel (ProgramDesc) bytes.")]
ParamsPart = Annotated[UploadFile | None, File(description="The .pdiparams bytes.")]


# NOTE: `def` routes: validation and compilation are CPU-bound, so they run in the threadpool.
@router.post(MODELS, status_code=status.HTTP_201_CREATED)
def upload_model(
    principal: PrincipalDep,
    models: ModelsDep,
    metrics: MetricsDep,
    name: Annotated[str, Form()],
    program: ProgramPart,
    params: ParamsPart = None,
) -> dict[str, Any]:
    with metrics.upload(principal.tenant_id):
        return models.upload(principal, name, program.file.read(), _read(params))


@router.post(CHECK)
def check_model(
    _principal: PrincipalDep, models: ModelsDep, program: ProgramPart, params: ParamsPart = None
) -> dict[str, Any]:
    return {"valid": True, "report": models.check(program.file.read(), _read(params))}


@router.get("/models")
def list_models(principal: PrincipalDep, models: ModelsDep) -> dict[str, Any]:
    return {"models": models.list_models(principal)}


@router.get("/models/{name}")
def get_model(name: str, principal: PrincipalDep, models: ModelsDep) -> dict[str, Any]:
    return models.get_model(principal, name)


@router.delete("/models/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_model(name: str, principal: PrincipalDep, models: ModelsDep) -> None:
    models.delete(principal, name)


@router.delete("/models/{name}/versions/{version}", status_code=status.HTTP_204_NO_CONTENT)
def delete_version(name: str, version: int, principal: PrincipalDep, models: ModelsDep) -> None:
    models.delete(principal, name, version)


@router.get("/models/{name}/versions/{version}/onnx")
def download_onnx(name: str, version: int, principal: PrincipalDep, models: ModelsDep) -> Response:
    data = models.onnx(principal, name, version)
    disposition = f'attachment; filename="{name}-{version}.onnx"'
    return Response(
        data, media_type="application/octet-stream", headers={"Content-Disposition": disposition}
    )


def _read(part: UploadFile | None) -> bytes | None:
    return None if part is None else part.file.read()
