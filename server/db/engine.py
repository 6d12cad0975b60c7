"""The SQLite engine in the data directory, migrated to the newest schema by Alembic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

_MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def open_database(path: Path) -> sessionmaker[Session]:
    """Opens (creating if needed) the database file and applies every pending migration."""
    engine = create_engine(f"sqlite:///{path}")
    event.listen(engine, "connect", _pragmas)
    migrate(engine)
    return sessionmaker(engine, expire_on_commit=False)


def migrate(engine: Engine) -> None:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def _pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL for concurrent readers; FULL so that a committed row survives power loss.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
