"""Route paths the middlewares look at, defined once: the routes are declared with these, and
the middlewares (body caps, inference metrics) match requests against the same templates."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from starlette.routing import compile_path

V1: Final = "/v1"
MODELS: Final = "/models"  # under V1: upload (POST), list (GET)
CHECK: Final = "/check"  # under V1: the dry-run check
UPLOAD_PATHS: Final = (V1 + MODELS, V1 + CHECK)  # the routes that take a model upload
V2_MODELS: Final = "/v2/models"
V2_INFER_PATHS: Final = (
    V2_MODELS + "/{name}/infer",
    V2_MODELS + "/{name}/versions/{version}/infer",
)


class Paths:
    """Matches request paths against route `templates` (Starlette's own path syntax), with or
    without a trailing slash."""

    def __init__(self, templates: Iterable[str]) -> None:
        self._regexes = tuple(compile_path(template)[0] for template in templates)

    def __contains__(self, path: str) -> bool:
        path = path.rstrip("/") or "/"
        return any(regex.match(path) for regex in self._regexes)
