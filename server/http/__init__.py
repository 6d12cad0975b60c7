"""The HTTP edge: what every request meets before and after a route (the route table, body and
connection limits, the inference fast path, metrics middleware, dependencies that authenticate
and resolve, and the one table from domain errors to HTTP statuses). See docs/architecture.md."""
