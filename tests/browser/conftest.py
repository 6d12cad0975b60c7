"""A real `graphgate serve` and Debian's headless chromium driven by Playwright.

The browser is the system's (`.ci/run` installs Debian's `chromium`); Playwright never downloads
one. Without it these tests cannot run, so they fail with the reason rather than skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Playwright, expect, sync_playwright

from tests.support.served import Server

CHROMIUM = os.environ.get("GRAPHGATE_CHROMIUM", "/usr/bin/chromium")
# How long `expect` waits for a page to show what it should: a wait, not a measure. Playwright's
# default, 5 s, is a bound chromium on a loaded 2-CPU machine can come near; 30 s, its default
# for actions and navigations, is far over what a page takes.
expect.set_options(timeout=30_000)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    executable = shutil.which(CHROMIUM) or CHROMIUM
    assert Path(executable).exists(), f"expected Debian's chromium at {CHROMIUM}, got none"
    # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start.
    launched = playwright.chromium.launch(
        executable_path=executable, headless=True, args=["--no-sandbox"]
    )
    yield launched
    launched.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("console") / "data") as s:
        yield s
