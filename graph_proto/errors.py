"""The one error graph_proto raises on hostile or broken bytes."""

from __future__ import annotations


class FormatError(ValueError):
    """Bytes that are not a valid program or params file.

    `code` is one of the validator's stable diagnostic codes (validator.diagnostics.Code), kept as
    a plain string so that graph_proto stays below the validator in the import order.
    """

    def __init__(self, code: str, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.index = index  # the tensor's position in a .pdiparams file, when it applies
