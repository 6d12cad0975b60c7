"""Route paths the middlewares look at, defined once: the routes are declared with these, and
the middlewares (body caps, inference metrics) match requests against the same templates."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

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
    """Matches request paths against route `templates` (`{param}` matches one path segment, as
    in Starlette's routes), with or without a trailing slash: one regex for all of them, since
    the middlewares ask on every request."""

    def __init__(self, templates: Iterable[str]) -> None:
        alternatives = "|".join(_PARAM.sub("[^/]+", re.escape(t)) for t in templates)
        self._regex = re.compile(f"^(?:{alternatives})/?$")

    def __contains__(self, path: str) -> bool:
        return self._regex.match(path) is not None


# A `{param}` once re.escape has escaped its braces.
_PARAM: Final = re.compile(r"\\\{[a-z_]+\\\}")
