"""Use cases of the service as plain functions and classes: no FastAPI here."""
