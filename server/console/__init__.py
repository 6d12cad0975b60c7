"""The operator's web console under /admin: server-rendered pages on the operator services."""
