"""The `graphgate` command line: check, convert and run programs offline (no Paddle), serve."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Final, NoReturn

import typer

from server.cli import admin as cli_admin
from server.cli import ops as cli_ops
from server.cli import user as cli_user
from server.cli.tenants import tenants

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


ProgramArg = Annotated[
    Path,
    typer.Argument(
        help="The program: a .pdmodel (legacy ProgramDesc) or Paddle 3's PIR .json, told apart "
        "by content."
    ),
]
ParamsOpt = Annotated[
    Path | None,
    typer.Option(
        "--params",
        help="The .pdiparams file; by default the one beside the program with the same stem.",
    ),
]


@app.command()
def check(
    program: ProgramArg,
    params: ParamsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    max_batch: Annotated[
        int | None, typer.Option(help="Batch size the budgets are evaluated at.", min=1)
    ] = None,
    dim: Annotated[
        list[str] | None,
        typer.Option(
            "--dim",
            help="NAME=SIZE: the most an unknown input dim takes (D1, ... as the report names "
            "them, or INPUT.AXIS); its budgets' bound, checked on every request.",
        ),
    ] = None,
    signature: Annotated[
        Path | None,
        typer.Option(
            "--signature",
            help="A model_signing bundle over the program and params (by their file names), "
            "verified offline first.",
        ),
    ] = None,
    trusted_keys: Annotated[
        list[Path] | None,
        typer.Option("--trusted-key", help="A PEM public key the signature may be by (repeat)."),
    ] = None,
    trusted_ca: Annotated[
        Path | None,
        typer.Option("--trusted-ca", help="A PEM CA bundle a signing certificate may chain to."),
    ] = None,
    identities: Annotated[
        list[str] | None,
        typer.Option("--identity", help="A certificate subject or SAN allowed to sign (repeat)."),
    ] = None,
) -> None:
    """Check a program is servable (validated, lowered, gated, a session built: what upload
    does): diagnostics like a compiler, or the report. With --signature, its signature is
    verified first, as a tenant's upload is. Exit 0 valid, 1 rejected."""
    params = params if params is not None else _params_beside(program)
    dims = dim_declarations(dim or [])
    trust = _trust(signature, trusted_keys or [], trusted_ca, identities or [])
    provenance = None if signature is None else _verified(signature, program, params, trust)
    report = _servable(program, params, as_json, max_batch, dims).program.report
    signed = None if provenance is None else provenance.to_json()
    if as_json:
        document = {"valid": True, "report": report.to_json(), "provenance": signed}
        typer.echo(json.dumps(document, indent=2))
    else:
        from server.cli.render import render_report

        render_report(program, params, report, signed)


def _trust(signature: Path | None, keys: list[Path], ca: Path | None, identities: list[str]) -> Any:
    """The trust --signature is verified against, from the files named; usage errors exit 2."""
    from server.dispatch.signing import SigningTrust, ca_certificates_in, public_keys_in
    from server.errors import InvalidRules

    if signature is None:
        if keys or ca is not None or identities:
            _usage("--trusted-key, --trusted-ca and --identity go with --signature")
        return SigningTrust()
    if not keys and ca is None:
        _usage("expected --trusted-key or --trusted-ca with --signature, got neither")
    try:
        pems = tuple(k for path in keys for k in public_keys_in(_read(path).decode()))
        ca_text = "" if ca is None else _read(ca).decode()
        if ca_text:
            ca_certificates_in(ca_text)
    except (InvalidRules, UnicodeDecodeError) as e:
        _usage(str(e))
    return SigningTrust(pems, ca_text, tuple(identities))


def _verified(signature: Path, program: Path, params: Path | None, trust: Any) -> Any:
    """The signature verified over the files by their names, now; a refusal exits 1."""
    from datetime import UTC, datetime

    from server.dispatch.signing import verify
    from server.errors import SignatureRefused

    files = {program.name: _read(program)}
    if params is not None:
        files[params.name] = _read(params)
    try:
        return verify(_read(signature), files, trust, datetime.now(UTC))
    except SignatureRefused as refused:
        _fail(signature, refused.message, refused.code)


def _usage(message: str) -> NoReturn:
    typer.echo(f"graphgate: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


@app.command()
def convert(
    program: ProgramArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the .onnx.")],
    params: ParamsOpt = None,
) -> None:
    """Convert a Paddle program (legacy or PIR) to ONNX offline: validated, exact, gated. No
    Paddle needed.
    The .onnx is portable: its outputs are exactly the program's fetches."""
    from executor.convert import export
    from validator import GraphError

    validated = _validated(program, _or_beside(program, params), False, None)
    try:
        model = export(validated)
    except GraphError as e:
        _fail(program, str(e), e.code)
    try:
        output.write_bytes(model.SerializeToString())
    except OSError as e:
        typer.echo(f"graphgate: cannot write {output}: {e.strerror or e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(
        f"{output}: {len(model.graph.node)} ONNX nodes, opset {model.opset_import[0].version}"
    )


@app.command()
def run(
    program: ProgramArg,
    inputs: Annotated[
        list[str], typer.Option("--input", "-i", help="NAME=FILE.npy, once per program input.")
    ],
    params: ParamsOpt = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the outputs to this .npz.")
    ] = None,
) -> None:
    """Run a program on .npy inputs with onnxruntime: prints the outputs or writes an .npz."""
    import numpy as np

    from executor import ExecutionError, SessionOptions, compile, say_device_once
    from validator import GraphError

    validated = _validated(program, _or_beside(program, params), False, None)
    feeds = {name: _load_npy(name, path) for name, path in map(_name_and_path, inputs)}
    options = SessionOptions()
    say_device_once(options.use_cuda)
    try:
        outputs = compile(validated, options).run(feeds)
    except GraphError as e:
        _fail(program, str(e), e.code)
    except ExecutionError as e:
        _fail(program, str(e), e.code)
    if output is not None:
        with output.open("wb") as f:
            save: Any = np.savez  # numpy's stubs read **arrays as its allow_pickle flag
            save(f, **outputs)
        typer.echo(f"{output}: {', '.join(outputs)}")
        return
    with np.printoptions(threshold=20, edgeitems=3, precision=6):
        for name, value in outputs.items():
            typer.echo(f"{name}: {value.dtype}{list(value.shape)}\n{value}")


def _validated(program: Path, params: Path | None, as_json: bool, max_batch: int | None) -> Any:
    """validate() on the files; a rejection is printed, exit 1."""
    from validator import validate

    return _checked(validate, program, params, as_json, max_batch)


def _servable(
    program: Path,
    params: Path | None,
    as_json: bool,
    max_batch: int | None,
    dims: dict[str, int] | None = None,
) -> Any:
    """check_servable() on the files, as upload runs it; a rejection is printed, exit 1."""
    from executor import SessionOptions, check_servable, say_device_once

    say_device_once(SessionOptions().use_cuda)  # the session is built as upload builds it

    def servable(program_bytes: bytes, params_bytes: bytes | None, policy: Any) -> Any:
        return check_servable(program_bytes, params_bytes, policy, dims=dims)

    return _checked(servable, program, params, as_json, max_batch)


def dim_declarations(specs: list[str]) -> dict[str, int]:
    """The --dim options (each NAME=SIZE, or several joined by commas); bad syntax exits 2."""
    from validator.dims import DimSyntaxError, parse_dim_declarations

    try:
        return parse_dim_declarations(specs)
    except DimSyntaxError as e:
        typer.echo(f"graphgate: --dim: {e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None


def _checked(
    check: Callable[[bytes, bytes | None, Any], Any],
    program: Path,
    params: Path | None,
    as_json: bool,
    max_batch: int | None,
) -> Any:
    """`check` on the files' bytes under the default policy (its max_batch replaced when given)."""
    from validator import DEFAULT_POLICY, ValidationFailed

    program_bytes = _read(program)
    params_bytes = _read(params) if params is not None else None
    policy = DEFAULT_POLICY if max_batch is None else replace(DEFAULT_POLICY, max_batch=max_batch)
    try:
        return check(program_bytes, params_bytes, policy)
    except ValidationFailed as failed:
        _print_rejection(program, failed, as_json)
        raise typer.Exit(EXIT_REJECTED) from None


def _or_beside(program: Path, params: Path | None) -> Path | None:
    return params if params is not None else _params_beside(program)


def _name_and_path(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        typer.echo(f"graphgate: expected --input NAME=FILE.npy, got {spec!r}", err=True)
        raise typer.Exit(EXIT_USAGE)
    return name, Path(path)


def _load_npy(name: str, path: Path) -> Any:
    import numpy as np

    try:
        # allow_pickle=False: an .npy never makes graphgate run code.
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        typer.echo(f"graphgate: cannot read input {name!r} from {path}: {e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None


def _fail(program: Path, message: str, code: object) -> NoReturn:
    typer.echo(f"{program}: {message} [{code}]", err=True)
    raise typer.Exit(EXIT_REJECTED)


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
    grpc_port: Annotated[
        int | None, typer.Option(help="gRPC port (GRAPHGATE_GRPC_PORT; 0: no gRPC).")
    ] = None,
) -> None:
    """Run the service: the model API (/v1), admin REST (/v1/admin), KServe V2 (/v2), and KServe
    V2 over gRPC on its own port."""
    import uvicorn

    from server.main import create_app
    from server.settings import Settings

    _reuse_body_sized_memory()
    overrides = {"host": host, "port": port, "data_dir": data_dir, "grpc_port": grpc_port}
    settings = Settings.model_validate({k: v for k, v in overrides.items() if v is not None})
    server = _draining_server(uvicorn.Config(create_app(settings), **uvicorn_options(settings)))
    server.run()
    if not server.started:
        raise typer.Exit(3)  # uvicorn.run's STARTUP_FAILURE


def _draining_server(config: Any) -> Any:
    """uvicorn's Server, but a SIGTERM it drained ends the process with status 0: SIGTERM is the
    orchestrator's normal stop, and uvicorn would raise it again after the drain (status -15)."""
    import signal

    import uvicorn

    class DrainingServer(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            _freeze_startup_heap()

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            _begin_grpc_stop(self.config)
            if sig == signal.SIGTERM:
                self._captured_signals.remove(sig)  # NOTE: private; what it re-raises at exit

    return DrainingServer(config)


def _begin_grpc_stop(config: Any) -> None:
    """The gRPC endpoint starts its graceful stop as uvicorn starts draining HTTP: both within
    `shutdown_grace_s` (the app's lifespan would stop it only after HTTP's drain)."""
    from server.grpc import server as grpc_server

    endpoint = getattr(getattr(config.app, "state", None), "grpc_endpoint", None)
    if isinstance(endpoint, grpc_server.Endpoint):
        grpc_server.begin_stop(endpoint, config.timeout_graceful_shutdown or 0)


# glibc's mallopt parameters (malloc.h) and the values set: a block up to 32 MiB (glibc's own
# ceiling for its adaptive threshold) comes from the heap; the heap's top is returned to the
# system once 64 MiB of it are free (glibc's rule: twice the threshold).
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_MMAP_THRESHOLD_BYTES: Final = 32 * 1024 * 1024
_TRIM_THRESHOLD_BYTES: Final = 2 * _MMAP_THRESHOLD_BYTES


def _reuse_body_sized_memory() -> None:
    """Makes glibc serve request-sized blocks (a body's 256 KiB reads, the 3 MB body, the
    decoded tensor) from memory it keeps, instead of a fresh mmap each, freed at once.

    NOTE: every fresh page costs a fault on first touch: reading a 3.1 MB JSON body cost the
    event loop 4.1 ms of CPU, 3.8 ms of it in the kernel, ~1,200 page faults (13 reads of
    256 KiB, each copied twice by uvicorn, then Starlette's join). glibc raises its threshold
    by itself only after freeing such a block. The memory kept is about the busiest moment's;
    bodies of 16 MiB and more are still given back after their request (the malloc_trim in
    server/services/inference.py). An operator's own MALLOC_*_ settings win. benchmarks/results/json_tensors.md has the figures."""
    import ctypes
    import os

    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)


def _freeze_startup_heap() -> None:
    """Moves every object alive once the server is up (modules, the op registry, SQLAlchemy's
    metadata, the services: ~1M objects) out of the garbage collector's reach.

    NOTE: a full collection walks every tracked object; on this heap it paused the event loop
    for 90-130 ms every few seconds under load, the whole p99 of busy serving. What startup
    made lives as long as the process, so walking it again finds nothing."""
    import gc

    gc.collect()
    gc.freeze()


def uvicorn_options(settings: Any) -> dict[str, Any]:
    """uvicorn's options from the settings: our HTTP protocol (server/http/limits.py) with its
    caps and timeouts, and the SIGTERM grace period (uvicorn stops accepting, then waits for
    in-flight requests up to it)."""
    from server.http.limits import HttpLimits, protocol_class

    limits = HttpLimits(
        max_header_bytes=settings.max_header_bytes,
        max_headers=settings.max_headers,
        max_request_line_bytes=settings.max_request_line_bytes,
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
    )
    return {
        "host": settings.host,
        "port": settings.port,
        "access_log": settings.access_log,
        "http": protocol_class(limits),
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "timeout_graceful_shutdown": settings.shutdown_grace_s,
        # Forwarded headers only from the configured proxies: uvicorn's default believes them
        # from loopback, which let any local caller forge its address.
        "proxy_headers": bool(settings.trusted_proxies.strip()),
        "forwarded_allow_ips": settings.trusted_proxies.replace(" ", "") or None,
    }


app.add_typer(tenants, name="tenants")
app.add_typer(cli_admin.admins, name="admins")
app.add_typer(cli_admin.policy, name="policy")
app.add_typer(cli_admin.quota, name="quota")
app.add_typer(cli_admin.audit, name="audit")
cli_user.register(app)
cli_ops.register(app)

if __name__ == "__main__":
    app()
