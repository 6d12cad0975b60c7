"""`graphgate migrate` and `graphgate doctor`: operating a deployment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

if TYPE_CHECKING:
    from server.settings import Settings

EXIT_OK: Final = 0
EXIT_PROBLEM: Final = 1


def migrate() -> None:
    """Apply every pending database migration and exit (the Kubernetes migration Job runs
    this). On PostgreSQL an advisory lock makes concurrent runs and starting replicas wait
    for each other; `serve` also migrates at start, so running this first is optional."""
    from server.db.engine import create, migrate
    from server.main import database_location, pool_settings
    from server.settings import Settings

    settings = Settings()
    location = database_location(settings)
    if not isinstance(location, str):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(create(location, pool_settings(settings)))
    typer.echo(f"graphgate: database at {_shown(location)} is at the newest schema")


def doctor(
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory (GRAPHGATE_DATA_DIR).")
    ] = None,
) -> None:
    """Print what this machine and these settings give graphgate: the device and why CUDA is
    not used (the words `check`, `run` and `serve` say), the execution providers, the CUDA
    libraries found or missing, then the data directory, the database and the artifact store,
    or what `serve` will create where. Creates nothing. Exit 1 only for what would fail: a
    store that does not answer, a directory that cannot be written or created."""
    from server import gpu
    from server.settings import Settings

    settings = Settings.model_validate({} if data_dir is None else {"data_dir": data_dir})
    for line in gpu.doctor_lines(settings.use_cuda):
        typer.echo(line)  # running on the CPU is a valid configuration, not a problem
    problems = _data_dir(settings.data_dir)
    problems += _database(settings)
    problems += _artifact_store(settings)
    raise typer.Exit(EXIT_PROBLEM if problems else EXIT_OK)


def _data_dir(path: Path) -> int:
    """Whether `serve` can use the data directory, or create it (its nearest existing parent)."""
    shown = path.absolute()
    if path.is_dir():
        if _writable(path):
            typer.echo(f"data directory {shown}: writable")
            return 0
        typer.echo(f"data directory {shown}: NOT writable")
        return 1
    if path.exists():
        typer.echo(f"data directory {shown}: NOT a directory")
        return 1
    parent = _nearest_existing(shown)
    if not parent.is_dir():
        typer.echo(f"data directory {shown}: cannot be created ({parent} is NOT a directory)")
        return 1
    if not _writable(parent):
        typer.echo(f"data directory {shown}: cannot be created ({parent} NOT writable)")
        return 1
    typer.echo(f"data directory {shown}: will be created (parent {parent} writable)")
    return 0


def _database(settings: Settings) -> int:
    """A configured PostgreSQL must answer; a SQLite file that `serve` will create is fine."""
    from sqlalchemy.exc import SQLAlchemyError

    from server.db.engine import create, ping
    from server.main import database_location, pool_settings

    location = database_location(settings)
    if isinstance(location, Path) and not location.exists():
        # Connecting would create the file: say what the first `serve` or `migrate` makes.
        typer.echo(f"database {location.absolute()}: will be created at first start (SQLite)")
        return 0
    try:
        ping(create(location, pool_settings(settings)))
    except (SQLAlchemyError, ValueError) as error:
        typer.echo(f"database {_shown(location)}: UNREACHABLE: {type(error).__name__}")
        return 1
    typer.echo(f"database {_shown(location)}: reachable")
    return 0


def _artifact_store(settings: Settings) -> int:
    """A configured S3 bucket must answer; the artifacts folder may be created at first start."""
    from server.storage import StorageUnavailable, open_artifacts

    if settings.artifacts_url is None:
        folder = (settings.data_dir / "artifacts").absolute()
        if not folder.exists():  # opening the folder store would create it
            typer.echo(f"artifact store {folder}: will be created (at first start)")
            return 0
        writable = folder.is_dir() and _writable(folder)
        typer.echo(f"artifact store {folder}: {'writable' if writable else 'NOT writable'}")
        return 0 if writable else 1
    try:
        artifacts = open_artifacts(settings.artifacts_url, settings.data_dir)
        store_ping = getattr(artifacts, "ping", None)
        if store_ping is not None:
            store_ping()
    except (StorageUnavailable, OSError) as error:
        typer.echo(f"artifact store {settings.artifacts_url}: UNREACHABLE: {error}")
        return 1
    typer.echo(f"artifact store {settings.artifacts_url}: reachable")
    return 0


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable(path: Path) -> bool:
    import os

    # Creating an entry in a directory needs write and search permission on it.
    return os.access(path, os.W_OK | os.X_OK)


def _shown(location: object) -> str:
    """A database location without its password."""
    from sqlalchemy.engine import make_url

    if isinstance(location, str):
        return make_url(location).render_as_string(hide_password=True)
    return str(location)


def register(app: typer.Typer) -> None:
    app.command()(migrate)
    app.command()(doctor)
