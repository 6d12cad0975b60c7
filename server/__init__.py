"""The graphgate service: app factory, routes, services, storage and the CLI."""

from __future__ import annotations

__version__ = "0.1.0"
