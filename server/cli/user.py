"""`graphgate upload`, `graphgate models`, `graphgate infer`: a tenant's side of the service.

Plain HTTP clients of /v1 (model API) and /v2 (KServe V2, binary tensor extension), and with
`infer --grpc` a plain gRPC client (server/cli/grpc_client.py); they import nothing from the
service itself, so they behave exactly like any other client. Exit status: 0 done,
1 the upload was rejected (every diagnostic printed), 2 usage, I/O or any other HTTP error.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn

import typer

if TYPE_CHECKING:
    import httpx2
    import numpy as np

EXIT_OK: Final = 0
EXIT_REJECTED: Final = 1
EXIT_ERROR: Final = 2
DEFAULT_URL: Final = "http://127.0.0.1:8000"
HEADER_LENGTH: Final = "Inference-Header-Content-Length"
UPLOAD_TIMEOUT_S: Final = 600.0  # the server validates and compiles before it answers
# The server's refusals of a signed (or unsigned, where required) upload: rejected, exit 1.
SIGNATURE_REFUSALS: Final = frozenset(
    {
        "SIGNATURE_MISSING",
        "SIGNATURE_MALFORMED",
        "SIGNATURE_MISMATCH",
        "SIGNER_UNTRUSTED",
        "CERTIFICATE_EXPIRED",
        "CERTIFICATE_NOT_YET_VALID",
    }
)
# The server's refusals of the program itself (every diagnostic printed), exit 1.
REJECTIONS: Final = frozenset({"VALIDATION_FAILED", "DIM_DECLARATION_REFUSED"})
INFER_TIMEOUT_S: Final = 120.0
# numpy dtype name -> V2 datatype (BF16 has no numpy dtype; send it from another client)
DATATYPES: Final[Mapping[str, str]] = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
}
NUMPY_TYPES: Final[Mapping[str, str]] = {v: k for k, v in DATATYPES.items()}

UrlOpt = Annotated[
    str, typer.Option("--url", envvar="GRAPHGATE_URL", help="Server URL (GRAPHGATE_URL).")
]
KeyOpt = Annotated[
    str,
    typer.Option(
        "--key",
        envvar="GRAPHGATE_API_KEY",
        help="Your API key (GRAPHGATE_API_KEY).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the server's JSON answer.")]


def register(app: typer.Typer) -> None:
    """Adds the user commands to the `graphgate` application."""
    app.command()(upload)
    app.command()(models)
    app.command()(infer)


# -- commands ------------------------------------------------------------------------------


def upload(
    name: Annotated[str, typer.Argument(help="Model name; each upload of a name adds a version.")],
    program: Annotated[Path, typer.Argument(help="The .pdmodel file (a legacy ProgramDesc).")],
    params: Annotated[
        Path | None, typer.Option("--params", help="The .pdiparams file, if the model has one.")
    ] = None,
    signature: Annotated[
        Path | None,
        typer.Option(
            "--signature",
            help="A model_signing bundle over the program and params (as named here), e.g. "
            "model.sig from `model_signing sign key`.",
        ),
    ] = None,
    dim: Annotated[
        list[str] | None,
        typer.Option(
            "--dim",
            help="NAME=SIZE: the most an unknown input dim takes (D1, ... as the report names "
            "them, or INPUT.AXIS); its budgets' bound, checked on every request (repeat).",
        ),
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    key: KeyOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """Uploads a model (with a progress bar); prints its report, or every diagnostic if rejected."""
    parts = {"program": program} | ({"params": params} if params is not None else {})
    parts |= {"signature": signature} if signature is not None else {}
    # The server reads the declarations (the `dims` form field, comma-separated), as `check
    # --dim` does: one syntax, one parser.
    fields = {"name": name} | ({"dims": ",".join(dim)} if dim else {})
    with _client(url, key, UPLOAD_TIMEOUT_S) as client, _progress_files(parts) as files:
        response = _send(client, "POST", "/v1/models", data=fields, files=files)
    body = _json(response)
    if response.status_code == 422 and body.get("code") in REJECTIONS:
        _print_rejection(program, body)
        raise typer.Exit(EXIT_REJECTED)
    if response.status_code == 422 and body.get("code") in SIGNATURE_REFUSALS:
        typer.echo(f"{signature or program}: {body.get('error')} [{body.get('code')}]", err=True)
        raise typer.Exit(EXIT_REJECTED)
    _raise_for_error(response, body)
    if as_json:
        typer.echo(json.dumps(body, indent=2))
        return
    _print_upload(body)


def models(url: UrlOpt = DEFAULT_URL, key: KeyOpt = "", as_json: JsonOpt = False) -> None:
    """Lists your models: versions, the latest one and its signature."""
    with _client(url, key, INFER_TIMEOUT_S) as client:
        response = _send(client, "GET", "/v1/models")
    body = _json(response)
    _raise_for_error(response, body)
    if as_json:
        typer.echo(json.dumps(body, indent=2))
        return
    _print_models(body.get("models", []))


def infer(
    name: Annotated[str, typer.Argument(help="The model to run.")],
    inputs: Annotated[
        list[str], typer.Option("--input", "-i", help="NAME=FILE.npy, once per model input.")
    ],
    version: Annotated[
        int | None, typer.Option("--version", help="Model version (default: the latest).", min=1)
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the outputs to this .npz.")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    key: KeyOpt = "",
    grpc: Annotated[
        bool, typer.Option("--grpc", help="Over KServe V2 gRPC instead of HTTP.")
    ] = False,
    grpc_url: Annotated[
        str | None,
        typer.Option(
            "--grpc-url",
            envvar="GRAPHGATE_GRPC_URL",
            help="grpc://HOST:PORT or grpcs://HOST:PORT (GRAPHGATE_GRPC_URL; default: the "
            "--url host, port 8001, TLS if https).",
        ),
    ] = None,
) -> None:
    """Runs a model on .npy inputs (KServe V2 binary tensors, over HTTP or gRPC); prints the
    outputs or writes .npz."""
    feeds: dict[str, np.ndarray] = {}
    for spec in inputs:
        input_name, value = _load_input(spec)
        if input_name in feeds:
            _die(f"input {input_name!r}: expected once, got --input {input_name}=... twice")
        feeds[input_name] = value
    if grpc:
        outputs = _infer_grpc(grpc_url, url, key, name, version, feeds)
    else:
        outputs = _infer_http(url, key, name, version, feeds)
    if output is not None:
        _write_npz(output, outputs)
        return
    _print_outputs(outputs)


def _infer_http(
    url: str, key: str, name: str, version: int | None, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    from urllib.parse import quote

    body, headers = encode_infer_request(feeds)
    path = f"/v2/models/{quote(name, safe='')}"
    path += f"/versions/{version}" if version is not None else ""
    with _client(url, key, INFER_TIMEOUT_S) as client:
        response = _send(client, "POST", f"{path}/infer", content=body, headers=headers)
    if response.status_code >= 400:
        _raise_for_error(response, _json(response))
    try:
        return decode_infer_response(response.content, response.headers.get(HEADER_LENGTH))
    except ValueError as e:
        _die(f"unexpected answer from the server: {e}")


def _infer_grpc(
    grpc_url: str | None,
    url: str,
    key: str,
    name: str,
    version: int | None,
    feeds: Mapping[str, np.ndarray],
) -> dict[str, np.ndarray]:
    from server.cli import grpc_client

    if not key:
        _die("an API key is needed: --key or GRAPHGATE_API_KEY")
    try:
        address, tls = grpc_client.address_of(grpc_url, url)
    except ValueError as e:
        _die(str(e))
    try:
        return grpc_client.infer(
            address, tls, key, name, version, feeds, DATATYPES, INFER_TIMEOUT_S
        )
    except grpc_client.GrpcFailure as failure:
        if failure.code == "UNAVAILABLE":  # no answer of graphgate's: nothing listens there
            _die(f"cannot reach {address}: {failure.message}")
        typer.echo(f"error [{failure.code}]: {failure.message}", err=True)
        raise typer.Exit(EXIT_ERROR) from None


# -- the V2 binary tensor protocol, client side ----------------------------------------------


def encode_infer_request(feeds: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """A V2 request: a JSON header, then every input's raw bytes; all outputs asked binary."""
    import numpy as np

    entries, chunks = [], []
    for name, value in feeds.items():
        raw = np.ascontiguousarray(value).tobytes()
        entries.append(
            {
                "name": name,
                "shape": list(value.shape),
                "datatype": DATATYPES[value.dtype.name],
                "parameters": {"binary_data_size": len(raw)},
            }
        )
        chunks.append(raw)
    doc = {"inputs": entries, "parameters": {"binary_data_output": True}}
    header = json.dumps(doc, separators=(",", ":")).encode()
    headers = {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}
    return b"".join([header, *chunks]), headers


def decode_infer_response(content: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    """The outputs of a V2 response, JSON `data` or binary; ValueError if it is inconsistent."""
    import numpy as np

    try:
        split = int(header_length) if header_length is not None else len(content)
        doc = json.loads(content[:split])
        offset = split
        outputs: dict[str, np.ndarray] = {}
        for entry in doc["outputs"]:
            bf16 = entry["datatype"] == "BF16"  # binary: the upper halves of float32s
            dtype = np.dtype("uint16" if bf16 else NUMPY_TYPES[entry["datatype"]])
            shape = tuple(entry["shape"])
            size = entry.get("parameters", {}).get("binary_data_size")
            if size is None:
                kind = np.float32 if bf16 else dtype
                outputs[entry["name"]] = np.asarray(entry["data"], kind).reshape(shape)
                continue
            if offset + size > len(content):
                raise ValueError(f"output {entry['name']!r}: expected {size} bytes, got fewer")
            value = np.frombuffer(content, dtype, size // dtype.itemsize, offset).reshape(shape)
            outputs[entry["name"]] = _widen_bf16(value) if bf16 else value
            offset += size
    except (KeyError, TypeError) as e:
        raise ValueError(f"expected a V2 inference response, got one without {e}") from None
    return outputs


def _widen_bf16(halves: np.ndarray) -> np.ndarray:
    import numpy as np

    return (halves.astype(np.uint32) << 16).view(np.float32)


# -- HTTP --------------------------------------------------------------------------------------


@contextmanager
def _client(url: str, key: str, timeout_s: float) -> Iterator[httpx2.Client]:
    import httpx2

    if not key:
        _die("an API key is needed: --key or GRAPHGATE_API_KEY")
    if not url.startswith(("http://", "https://")):
        _die(f"expected a server URL starting with http:// or https://, got {url!r}")
    headers = {"Authorization": f"Bearer {key}"}
    with httpx2.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s) as client:
        yield client


def _send(client: httpx2.Client, method: str, path: str, **kwargs: Any) -> httpx2.Response:
    import httpx2

    try:
        return client.request(method, path, **kwargs)
    except httpx2.HTTPError as e:
        _die(f"cannot reach {client.base_url}: {str(e) or type(e).__name__}")


def _json(response: httpx2.Response) -> dict[str, Any]:
    try:
        body = response.json() if response.content else {}
    except ValueError:
        body = {}
    return body if isinstance(body, dict) else {}


def _raise_for_error(response: httpx2.Response, body: Mapping[str, Any]) -> None:
    """`error [CODE]: message` on stderr and exit 2 when the server answered with an error."""
    if response.status_code < 400:
        return
    code = body.get("code", f"HTTP_{response.status_code}")
    message = body.get("error", response.reason_phrase or "no message")
    typer.echo(f"error [{code}]: {message}", err=True)
    raise typer.Exit(EXIT_ERROR)


# -- files ---------------------------------------------------------------------------------------


class _CountingFile(io.FileIO):
    """A file whose reads advance a progress callback (the upload streams it in chunks)."""

    def __init__(self, path: Path, advance: Callable[[int], None]) -> None:
        super().__init__(path, "rb")
        self._advance = advance

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self._advance(len(chunk))
        return chunk


@contextmanager
def _progress_files(parts: Mapping[str, Path]) -> Iterator[dict[str, Any]]:
    """The multipart file parts, open, with one progress bar over their bytes (on stderr)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    total = sum(_size(path) for path in parts.values())
    columns = ("{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        task = progress.add_task("upload", total=total)
        opened = {
            part: _CountingFile(path, lambda n: progress.advance(task, n))
            for part, path in parts.items()
        }
        try:
            yield {part: (path.name, opened[part]) for part, path in parts.items()}
        finally:
            for f in opened.values():
                f.close()


def _size(path: Path) -> int:
    try:
        if not path.is_file():
            _die(f"cannot read {path}: no such file")
        return path.stat().st_size
    except OSError as e:
        _die(f"cannot read {path}: {e.strerror or e}")


def _load_input(spec: str) -> tuple[str, np.ndarray]:
    import numpy as np

    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        _die(f"expected --input NAME=FILE.npy, got {spec!r}")
    try:
        # allow_pickle=False: an .npy never makes graphgate run code.
        value = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        _die(f"cannot read input {name!r} from {path}: {e}")
    if not isinstance(value, np.ndarray) or value.dtype.name not in DATATYPES:
        got = type(value).__name__ if not isinstance(value, np.ndarray) else value.dtype.name
        _die(f"input {name!r}: expected an array of {', '.join(DATATYPES)}, got {got}")
    return name, value


def _write_npz(output: Path, outputs: Mapping[str, np.ndarray]) -> None:
    import numpy as np

    try:
        with output.open("wb") as f:
            save: Any = np.savez  # numpy's stubs read **arrays as its allow_pickle flag
            save(f, **outputs)
    except OSError as e:
        _die(f"cannot write {output}: {e.strerror or e}")
    typer.echo(f"{output}: {', '.join(outputs)}")


def _die(message: str) -> NoReturn:
    typer.echo(f"graphgate: {message}", err=True)
    raise typer.Exit(EXIT_ERROR)


# -- printing ------------------------------------------------------------------------------------


def _print_rejection(program: Path, body: Mapping[str, Any]) -> None:
    diagnostics = body.get("diagnostics", [])
    for d in diagnostics:
        typer.echo(f"{program}: {_location(d)}: {d.get('message')} [{d.get('code')}]", err=True)
    typer.echo(f"error [{body.get('code')}]: {body.get('error')}", err=True)


def _location(d: Mapping[str, Any]) -> str:
    """Where a diagnostic points, as `graphgate check` writes it."""
    if d.get("op_index") is not None:
        return f"block {d.get('block') or 0}, op {d['op_index']} ({d.get('op_type')})"
    if d.get("var") is not None:
        where = f"block {d['block']}, " if d.get("block") is not None else ""
        return f"{where}var {d['var']!r}"
    return f"block {d['block']}" if d.get("block") is not None else "program"


def _print_upload(body: Mapping[str, Any]) -> None:
    report = body["report"]
    typer.echo(f"uploaded {body['name']!r} version {body['version']} ({body['status']})")
    if (provenance := body.get("provenance")) is not None:
        typer.echo(f"  {_signed_by(provenance)}")
    for kind in ("inputs", "outputs"):
        for spec in report[kind]:
            typer.echo(f"  {kind[:-1]:<6} {spec['name']}: {spec['dtype']}{spec['dims']}")
    cost = report["cost"]
    typer.echo(
        f"  {report['op_count']} ops, {report['params']['count']} parameter tensors "
        f"({report['params']['bytes']} bytes), {cost['flops_per_sample']} FLOPs per sample"
    )
    for warning in report.get("warnings", []):
        typer.echo(f"  warning: {warning}")


def _print_models(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    if not rows:
        typer.echo("no models yet: graphgate upload NAME model.pdmodel")
        return
    table = Table(title="Models", title_justify="left")
    for column in ("name", "latest", "signed", "versions", "inputs", "outputs"):
        table.add_column(column)
    for row in rows:
        signature = row.get("signature") or {"inputs": [], "outputs": []}
        provenance = row.get("provenance")
        table.add_row(
            row["name"],
            str(row.get("latest_version") or "-"),
            "-" if provenance is None else f"signed\n{_signer(provenance)}",
            ", ".join(map(str, row.get("versions", []))),
            _specs(signature["inputs"]),
            _specs(signature["outputs"]),
        )
    Console(highlight=False, width=max(100, _terminal_width())).print(table)


def _signed_by(provenance: Mapping[str, Any]) -> str:
    """As `graphgate check` says it (server/cli/render.py); written here again: this module
    imports nothing of the service."""
    fingerprint = provenance["key_fingerprint"]
    if provenance["method"] == "key":
        return f"signed by key {fingerprint}"
    return f"signed by {provenance['signer']} (certificate, key {fingerprint})"


def _signer(provenance: Mapping[str, Any]) -> str:
    """Who signed, short: the identity, or a key's fingerprint cut to 12 digits."""
    if provenance["method"] == "key":
        return f"key {str(provenance['key_fingerprint'])[:19]}"
    return str(provenance["signer"])


def _specs(specs: list[dict[str, Any]]) -> str:
    return "\n".join(f"{s['name']} {s['dtype']}{s['dims']}" for s in specs)


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size().columns


def _print_outputs(outputs: Mapping[str, np.ndarray]) -> None:
    import numpy as np

    with np.printoptions(threshold=20, edgeitems=3, precision=6):
        for name, value in outputs.items():
            summary = ""
            if value.size and value.dtype.kind in "iuf":
                summary = f"  min {value.min():.6g}  mean {value.mean():.6g}  max {value.max():.6g}"
            typer.echo(f"{name}: {value.dtype}{list(value.shape)}{summary}\n{value}")
