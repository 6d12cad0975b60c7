"""The route table: every path the app treats specially, defined once. The routes are declared
with these templates, and everything else that must know "is this an inference?" (the app's
entry, server/main.py; the infer fast path, server/http/fast_path.py; the body caps,
server/http/body_limit.py; the inference metrics, server/http/metrics.py) asks the same
`RouteTable`, never a regex or a suffix test of its own."""

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


class RouteTable:
    """Matches request paths against route `templates` (`{param}` matches one path segment,
    as in Starlette's routes): one regex for all of them, since it is asked on every request.

    `match` is the router's own reading (exact, the parameters by name); `in` also takes the
    path with a trailing slash (which the router redirects): what a middleware must still cap
    or count."""

    def __init__(self, templates: Iterable[str]) -> None:
        alternatives = []
        for index, template in enumerate(templates):
            # Each alternative's groups get its index: a name may repeat across templates.
            group = rf"(?P<\g<1>_{index}>[^/]+)"
            alternatives.append(_PARAM.sub(group, re.escape(template)))
        self._regex = re.compile(f"^(?:{'|'.join(alternatives)})(?P<slash>/?)$")

    def match(self, path: str) -> dict[str, str] | None:
        """The path parameters (`{"name": ...}`), None when no template matches exactly."""
        matched = self._regex.match(path)
        if matched is None or matched["slash"]:
            return None
        found = matched.groupdict()
        del found["slash"]
        return {_SUFFIX.sub("", key): value for key, value in found.items() if value}

    def __contains__(self, path: str) -> bool:
        return self._regex.match(path) is not None


# A `{param}` once re.escape has escaped its braces.
_PARAM: Final = re.compile(r"\\\{([a-z_]+)\\\}")
_SUFFIX: Final = re.compile(r"_\d+$")

INFER: Final = RouteTable(V2_INFER_PATHS)  # POST: one V2 inference
UPLOADS: Final = RouteTable(UPLOAD_PATHS)  # POST: a model upload or check
