"""The graphgate service: app factory, routes, services, storage and the CLI."""
