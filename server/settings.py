"""Service settings, from arguments or GRAPHGATE_* environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GRAPHGATE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    data_dir: Path = Path("graphgate-data")
    # Taken as the admin key when set; otherwise the first start makes one and prints it once.
    admin_token: SecretStr | None = None
    max_upload_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    model_cache_size: int = Field(default=64, ge=1)  # compiled sessions kept in memory
    # How long a checked API key and a model lookup stay cached in memory. This process's own
    # writes (revoke, upload, delete) take effect at once whatever the TTL; it bounds how long
    # another replica's writes go unseen. 0 turns the caches off.
    auth_cache_ttl_s: float = Field(default=5.0, ge=0)
    model_lookup_ttl_s: float = Field(default=5.0, ge=0)
    # uvicorn's line per request; off by default, as in Triton: /metrics counts every request
    # by tenant, model and status, and a line per request costs ~0.15 ms on the hot path.
    access_log: bool = False
    # An inference whose FLOPs estimate (the report's per sample x the batch) is at most this,
    # with a small body, runs on the event loop: a thread hop costs more than the model.
    # 0 runs every inference in the threadpool.
    inline_max_flops: int = Field(default=2_000_000, ge=0)
    # V2 inference bodies (after decompression too); Triton's --http-max-input-size default.
    max_infer_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    # Per tenant (README "Limits and metrics"): a token bucket over every request made with a
    # tenant key, and a cap on in-flight /v2 inference requests. 0 turns either off.
    tenant_rate_per_s: float = Field(default=200.0, ge=0)
    tenant_rate_burst: int = Field(default=400, ge=1)
    tenant_max_concurrent: int = Field(default=32, ge=0)

    @field_validator("admin_token")
    @classmethod
    def _strong_admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError("admin_token must be at least 32 characters")
        return value
