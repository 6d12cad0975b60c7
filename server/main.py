"""create_app(settings): the FastAPI application; nothing is created at import time."""

from __future__ import annotations

from fastapi import FastAPI

from server import errors
from server.routes import health
from server.settings import Settings


def create_app(settings: Settings) -> FastAPI:
    app = FastAPI(title="graphgate", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.settings = settings
    errors.install(app)
    app.include_router(health.router)
    return app
