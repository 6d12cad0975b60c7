"""ASGI middleware that records every V2 inference request in the app's Metrics.

It sees the final status whatever produced it (the route, a dependency, an error handler),
and reads the labels the request left in its state: the caller (`deps.get_principal`), the
resolved model (`deps.get_loaded_model`) and the error code (`errors`). A request that never got
that far is labelled "" for them, never with the raw path.
"""

from __future__ import annotations

import re
import time
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.services.metrics import NO_LABEL, Metrics
from server.services.types import LoadedModel, Principal

INFER_PATH: Final = re.compile(r"^/v2/models/[^/]+(?:/versions/[^/]+)?/infer/?$")
BINARY_HEADER: Final = b"inference-header-content-length"
# Keys of the request state (scope["state"]) shared with server/deps.py and server/errors.py.
STATE_PRINCIPAL: Final = "principal"
STATE_MODEL: Final = "model"
STATE_ERROR_CODE: Final = "error_code"


class InferenceMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not INFER_PATH.match(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        state: dict[str, object] = scope.setdefault("state", {})
        status = 500  # when the app raises before answering, the server answers 500

        async def observing_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observing_send)
        finally:
            self._record(scope, state, status, time.perf_counter() - started)

    def _record(self, scope: Scope, state: dict[str, object], status: int, seconds: float) -> None:
        principal = state.get(STATE_PRINCIPAL)
        model = state.get(STATE_MODEL)
        code = state.get(STATE_ERROR_CODE)
        self.metrics.inference(
            principal.tenant_id if isinstance(principal, Principal) else "",
            model.name if isinstance(model, LoadedModel) else NO_LABEL,
            binary=any(name == BINARY_HEADER for name, _ in scope["headers"]),
            status=status,
            code=code if isinstance(code, str) else ("INTERNAL" if status == 500 else None),
            seconds=seconds,
        )
