"""The metadata database: SQLite in the data directory by default, PostgreSQL by URL; both are
migrated to the newest schema by the same Alembic revisions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")

_MIGRATIONS: Final = Path(__file__).resolve().parent.parent / "migrations"
POSTGRES_DRIVERS: Final = ("postgresql", "postgresql+psycopg")


@dataclass(frozen=True, slots=True)
class DbPoolSettings:
    """Connections one process keeps to PostgreSQL (SQLite opens one per thread, no pool)."""

    size: int = 10
    max_overflow: int = 10
    timeout_s: float = 10.0


def open_database(
    path_or_url: Path | str, pool: DbPoolSettings = DbPoolSettings(), *, migrate_now: bool = True
) -> sessionmaker[Session]:
    """Opens the database (a SQLite file path, or a `postgresql+psycopg://` URL) and applies
    every pending migration unless `migrate_now` is False."""
    engine = create(path_or_url, pool)
    if migrate_now:
        migrate(engine)
    return sessionmaker(engine, expire_on_commit=False)


def create(path_or_url: Path | str, pool: DbPoolSettings = DbPoolSettings()) -> Engine:
    """The engine alone: nothing is connected or migrated yet."""
    if isinstance(path_or_url, Path):
        engine = create_engine(f"sqlite:///{path_or_url}")
        event.listen(engine, "connect", _pragmas)
        return engine
    url = make_url(path_or_url)
    if url.drivername not in POSTGRES_DRIVERS:
        raise ValueError(
            f"expected a database URL starting with postgresql+psycopg://, got {url.drivername}://"
        )
    return create_engine(
        url.set(drivername="postgresql+psycopg"),
        pool_size=pool.size,
        max_overflow=pool.max_overflow,
        pool_timeout=pool.timeout_s,
        # A replica outlives database restarts and failovers: test a pooled connection first.
        pool_pre_ping=True,
    )


def migrate(engine: Engine) -> None:
    """Upgrades to the newest revision; on PostgreSQL one process at a time (server/migrations/
    env.py takes an advisory lock, so replicas starting together never race)."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def ping(engine: Engine) -> None:
    """Raises unless the database answers a query (for `graphgate doctor`)."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def _pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL for concurrent readers; FULL so that a committed row survives power loss.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def retry_on_conflict(step: Callable[[], T], attempts: int = 3) -> T:
    """Runs an idempotent start-up step (create-if-missing) that replicas starting together
    may race on: the loser of an insert race sees a unique violation, and on the next try
    finds the winner's row and does nothing."""
    for attempt in range(attempts):
        try:
            return step()
        except IntegrityError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
