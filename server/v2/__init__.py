"""KServe V2 / Open Inference Protocol wire format, JSON and binary tensor extension (no FastAPI)."""
