"""Keys of the per-request state (the ASGI scope's "state", Starlette's `request.state`) that
the dependencies, the error handlers and the middlewares share: one name each, defined here."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Final

PRINCIPAL: Final = "principal"  # the caller (server/http/deps.py), a metrics label
MODEL: Final = "model"  # the resolved LoadedModel (server/http/deps.py), a metrics label
ERROR_CODE: Final = "error_code"  # the code of the error answered (server/http/errors.py)


def note(scope: MutableMapping[str, Any], key: str, value: object) -> None:
    """Leaves `value` under `key` in the request's state, creating the state if need be."""
    scope.setdefault("state", {})[key] = value


def state_of(scope: MutableMapping[str, Any]) -> dict[str, object]:
    """The request's state, created empty if need be (a middleware reads it after the app)."""
    state: dict[str, object] = scope.setdefault("state", {})
    return state
