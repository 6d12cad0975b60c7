"""HTTP routes: request and response shapes only; the work happens in server/services."""
