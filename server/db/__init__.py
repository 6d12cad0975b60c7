"""The metadata database: SQLAlchemy 2 tables and the engine, migrated by Alembic at start."""
