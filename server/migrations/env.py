"""Alembic environment: runs on the connection server/db/engine.py hands over.

On PostgreSQL the whole upgrade holds a transaction-scoped advisory lock: replicas that start
together apply the migrations one after the other (the second finds nothing left to do), and
the lock goes with the transaction, so a crashed migrator never leaves it held.
"""

from __future__ import annotations

from typing import Final

from alembic import context
from sqlalchemy import text

from server.db.models import Base

# Any fixed number, the same in every replica and used for nothing else.
MIGRATION_LOCK: Final = 0x4A7F3C21

connection = context.config.attributes["connection"]
if connection.dialect.name == "postgresql":
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
