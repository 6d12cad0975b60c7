"""A real `graphgate serve` process on a free loopback port, started from this checkout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import httpx2

from tests.support.api import ADMIN_TOKEN
from tests.support.realservers import free_port

ROOT: Final = Path(__file__).resolve().parents[2]  # the repository


class Server:
    """`graphgate serve` on a free port; `env` adds to its environment (the backend's
    GRAPHGATE_DATABASE_URL / GRAPHGATE_ARTIFACTS_URL, from conftest's `backend_env`); with
    `log`, its stdout and stderr go to that file for the test to read.

    `start` returns once it answers (`with Server(...) as server:` starts and stops it);
    `launch` returns at once, for a caller that starts several and waits on `ready` (their
    database and artifact store reached)."""

    def __init__(
        self, data_dir: Path, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> None:
        self.data_dir = data_dir
        self.env = dict(env or {})
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def launch(self) -> None:
        env = {**os.environ, **self.env, "GRAPHGATE_ADMIN_TOKEN": ADMIN_TOKEN}
        env["PYTHONPATH"] = str(ROOT)
        command = [sys.executable, "-m", "server.cli", "serve", "--port", str(self.port)]
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
        output = None if self.log is None else self.log.open("wb")
        try:
            self.process = subprocess.Popen(
                [*command, "--data-dir", str(self.data_dir)],
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=None if output is None else subprocess.STDOUT,
            )
        finally:
            if output is not None:
                output.close()  # the child holds its own descriptor

    def start(self) -> None:
        self.launch()
        deadline = time.monotonic() + 90  # a wait, not a measure: a loaded CI box starts slowly
        while time.monotonic() < deadline:
            try:
                if httpx2.get(f"{self.url}/v2/health/live", timeout=1).status_code == 200:
                    return
            except httpx2.HTTPError:
                time.sleep(0.1)
        self.stop(signal.SIGKILL)  # a server that never came up is not left running
        raise AssertionError("graphgate serve did not come up")

    def ready(self) -> bool:
        try:
            return httpx2.get(f"{self.url}/v2/health/ready", timeout=1).status_code == 200
        except httpx2.HTTPError:
            return False

    def log_tail(self, chars: int = 3000) -> str:
        """The end of what it wrote to `log`, to explain a server that did not come up."""
        return "" if self.log is None else self.log.read_text()[-chars:]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)
        self.process = None
