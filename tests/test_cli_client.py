"""The admin commands share one client (server/cli/client.py): a missing token or an
unreachable server is a one-line message and exit status 1 from every group, never a traceback."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from server.cli.main import app as cli


def _closed_port_url() -> str:
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


COMMANDS = (["tenants", "list"], ["admins", "list"], ["policy", "show", "acme"], ["audit"])


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_missing_admin_token_is_a_message(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GRAPHGATE_ADMIN_TOKEN", raising=False)
    result = CliRunner().invoke(cli, [*command, "--url", _closed_port_url()])
    assert result.exit_code == 1, result.output
    assert "graphgate: an admin token is needed" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_unreachable_server_is_a_message(command: list[str]) -> None:
    url = _closed_port_url()
    result = CliRunner().invoke(cli, [*command, "--url", url, "--admin-token", "t" * 40])
    assert result.exit_code == 1, result.output
    assert f"graphgate: cannot reach {url}" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
