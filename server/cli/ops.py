"""`graphgate migrate` and `graphgate doctor`: operating a deployment (issue 14)."""

from __future__ import annotations

from typing import Final

import typer

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


def doctor() -> None:
    """Print what this machine and these settings give graphgate: onnxruntime's execution
    providers and device, the CUDA libraries found or missing (and why CUDA is not used), the
    data directory, the database and the artifact store. Exit 1 when a store is unreachable."""
    from server.settings import Settings

    settings = Settings()
    problems = _runtime(settings.use_cuda)
    problems += _stores(settings)
    raise typer.Exit(EXIT_PROBLEM if problems else EXIT_OK)


def _runtime(use_cuda: bool) -> int:
    import onnxruntime as ort

    from server import gpu

    gpu.preload()
    typer.echo(f"onnxruntime {ort.__version__}, device {ort.get_device()}")
    typer.echo(f"execution providers: {', '.join(ort.get_available_providers())}")
    libraries = gpu.library_status()
    for name, error in libraries.items():
        typer.echo(f"  {name}: {'found' if error is None else 'missing (' + error + ')'}")
    reason = gpu.why_not_cuda(use_cuda, libraries)
    typer.echo("CUDA: used" if reason is None else f"CUDA: not used: {reason}")
    return 0  # running on the CPU is a valid configuration, not a problem


def _stores(settings: object) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from server.db.engine import create, ping
    from server.main import database_location, pool_settings
    from server.settings import Settings
    from server.storage import StorageUnavailable, open_artifacts

    assert isinstance(settings, Settings)
    problems = 0
    writable = settings.data_dir.is_dir() and _writable(settings.data_dir)
    typer.echo(
        f"data directory: {settings.data_dir} ({'writable' if writable else 'NOT writable'})"
    )
    location = database_location(settings)
    try:
        ping(create(location, pool_settings(settings)))
        typer.echo(f"database: {_shown(location)} reachable")
    except (SQLAlchemyError, ValueError) as error:
        problems += 1
        typer.echo(f"database: {_shown(location)} UNREACHABLE: {type(error).__name__}")
    store = settings.artifacts_url or str(settings.data_dir / "artifacts")
    try:
        artifacts = open_artifacts(settings.artifacts_url, settings.data_dir)
        store_ping = getattr(artifacts, "ping", None)
        if store_ping is not None:
            store_ping()
        typer.echo(f"artifact store: {store} reachable")
    except (StorageUnavailable, OSError) as error:
        problems += 1
        typer.echo(f"artifact store: {store} UNREACHABLE: {error}")
    return problems


def _writable(path: object) -> bool:
    import os

    return os.access(str(path), os.W_OK)


def _shown(location: object) -> str:
    """A database location without its password."""
    from sqlalchemy.engine import make_url

    if isinstance(location, str):
        return make_url(location).render_as_string(hide_password=True)
    return str(location)


def register(app: typer.Typer) -> None:
    app.command()(migrate)
    app.command()(doctor)
