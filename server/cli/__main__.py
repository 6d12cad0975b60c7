"""`python -m server.cli`: the `graphgate` command."""

from server.cli.main import app

app()
