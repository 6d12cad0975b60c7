"""The `graphgate` command line: `check` validates a program offline, without Paddle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Final

import typer

app = typer.Typer(
    name="graphgate",
    help="Validate, convert and serve PaddlePaddle inference programs safely.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_VALID: Final = 0
EXIT_REJECTED: Final = 1
EXIT_USAGE: Final = 2


@app.callback()
def main() -> None:
    """graphgate: a secure model-serving service for serialized Paddle programs."""


@app.command()
def check(
    program: Annotated[Path, typer.Argument(help="The .pdmodel file (a legacy ProgramDesc).")],
    params: Annotated[
        Path | None,
        typer.Option(
            "--params",
            help="The .pdiparams file; by default the one beside the program with the same stem.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    max_batch: Annotated[
        int | None, typer.Option(help="Batch size the budgets are evaluated at.", min=1)
    ] = None,
) -> None:
    """Validate a program: diagnostics like a compiler, or the report. Exit 0 valid, 1 rejected."""
    from validator import DEFAULT_POLICY, ValidationFailed, validate

    params = params if params is not None else _params_beside(program)
    program_bytes = _read(program)
    params_bytes = _read(params) if params is not None else None
    policy = DEFAULT_POLICY
    if max_batch is not None:
        from dataclasses import replace

        policy = replace(policy, max_batch=max_batch)
    try:
        validated = validate(program_bytes, params_bytes, policy)
    except ValidationFailed as failed:
        _print_rejection(program, failed, as_json)
        raise typer.Exit(EXIT_REJECTED) from None
    if as_json:
        typer.echo(json.dumps({"valid": True, "report": validated.report.to_json()}, indent=2))
    else:
        from server.cli_render import render_report

        render_report(program, params, validated.report)


def _params_beside(program: Path) -> Path | None:
    candidate = program.with_suffix(".pdiparams")
    return candidate if candidate.is_file() else None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        typer.echo(f"graphgate: cannot read {path}: {e.strerror or e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None


def _print_rejection(program: Path, failed: object, as_json: bool) -> None:
    from validator import ValidationFailed

    assert isinstance(failed, ValidationFailed)
    if as_json:
        body = {"valid": False, "diagnostics": [d.to_json() for d in failed.diagnostics]}
        typer.echo(json.dumps(body, indent=2))
        return
    for d in failed.diagnostics:
        typer.echo(f"{program}: {d}", err=True)
    count = len(failed.diagnostics)
    typer.echo(f"{program}: rejected with {count} error{'s' if count != 1 else ''}", err=True)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (GRAPHGATE_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (GRAPHGATE_PORT).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory (GRAPHGATE_DATA_DIR).")
    ] = None,
) -> None:
    """Run the service (health and metadata endpoints so far)."""
    import uvicorn

    from server.main import create_app
    from server.settings import Settings

    overrides = {"host": host, "port": port, "data_dir": data_dir}
    settings = Settings.model_validate({k: v for k, v in overrides.items() if v is not None})
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port)


if __name__ == "__main__":
    app()
