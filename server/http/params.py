"""Path and query values every admin route and console page takes, bounded once: a value out
of range is a 400 naming it before any service or database sees it (a version past a BIGINT
made SQLite raise). Names are matched whole by the services (check_name)."""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import Path

MAX_VERSION: Final = 2**31 - 1  # version numbers count uploads of one model

TenantName = Annotated[str, Path(max_length=64, description="a tenant's name")]
ModelName = Annotated[str, Path(max_length=64, description="a model's name")]
OperatorName = Annotated[str, Path(max_length=64, description="an operator's name")]
KeyId = Annotated[str, Path(max_length=32, description="a key's id (not its secret)")]
Version = Annotated[int, Path(ge=1, le=MAX_VERSION, description="a version number")]
