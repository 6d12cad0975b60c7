"""Pydantic bodies shared by the control-plane routes, for the OpenAPI document."""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    """Every error answer: a message saying what was expected and what was received, a code."""

    error: str
    code: str = Field(description="a stable code (README, 'Error codes')")
    diagnostics: list[dict[str, Any]] | None = Field(
        default=None, description="on a rejected upload or check: every problem found"
    )


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


# The statuses every control-plane route may answer, documented once.
ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    400: _error("a malformed request or a value out of range"),
    401: _error("no key, an unknown key or a revoked key"),
    403: _error("the key may not do this (role, suspended tenant, quota)"),
    404: _error("no such tenant, model, version or operator"),
    409: _error("conflicts with the stored state"),
    429: _error("over the tenant's request rate or concurrency"),
}
UPLOAD_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    **ERRORS,
    413: _error("the upload is over its byte cap"),
    422: _error(
        "the program is rejected: its signature, validation, the tenant's policy, lowering"
    ),
}
