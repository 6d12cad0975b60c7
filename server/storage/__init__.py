"""Durable bytes: content-addressed artifact files (no knowledge of models or tenants)."""
