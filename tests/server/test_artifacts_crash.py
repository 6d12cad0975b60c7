"""SIGKILL in the middle of a real artifact write: no torn artifact is ever visible, the temp file is swept.

A child process stores large artifacts through the production `Artifacts.put`; the parent kills it
the moment a temporary file exists, i.e. while bytes are being written or fsynced.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from server.storage.artifacts import TMP_PREFIX, Artifacts

_WRITER: Final = """
import os, sys
from pathlib import Path
from server.storage.artifacts import Artifacts
store = Artifacts(Path(sys.argv[1]))
for i in range(1000):
    store.put(os.urandom(1 << 20) * 48)  # 48 MiB, distinct each time
"""
_ATTEMPTS: Final = 5


def _kill_mid_write(root: Path) -> bool:
    """Runs the writer and SIGKILLs it once a temp file is present; True if it was still there."""
    child = subprocess.Popen([sys.executable, "-c", _WRITER, str(root)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            if list(root.glob(f"*/{TMP_PREFIX}*")):
                os.kill(child.pid, signal.SIGKILL)
                break
            time.sleep(0.001)
    finally:
        child.kill()
        child.wait()
    return bool(list(root.glob(f"*/{TMP_PREFIX}*")))


def test_sigkill_during_put_leaves_only_whole_artifacts(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    root.mkdir()
    # The kill can land just after a rename; try again until it lands mid-write.
    assert any(_kill_mid_write(root) for _ in range(_ATTEMPTS)), "never caught a write in flight"

    store = Artifacts(root)
    for path in root.glob("*/*"):
        if not path.name.startswith(TMP_PREFIX):
            assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
            assert store.get(path.name) == path.read_bytes()
    assert store.sweep() >= 1
    assert list(root.glob(f"*/{TMP_PREFIX}*")) == []
    data = b"after the crash"
    assert store.get(store.put(data)) == data
