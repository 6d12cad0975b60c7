"""JSON spellings shared by the routes."""

from __future__ import annotations

from datetime import datetime


def iso(moment: datetime | None) -> str | None:
    """A naive UTC datetime (as the database holds them) in ISO 8601 with a `Z`."""
    return None if moment is None else moment.isoformat() + "Z"
