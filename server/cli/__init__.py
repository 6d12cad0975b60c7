"""The `graphgate` command line: the offline tools (check, convert, run), the tenant's and the
operator's HTTP clients, serve, migrate and doctor (see docs/architecture.md)."""
