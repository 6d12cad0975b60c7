"""Alembic migrations of the metadata database, applied programmatically at start."""
