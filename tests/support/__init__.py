"""What several test modules and benchmarks share; no test module imports another
(tests/test_layout.py checks it).

- builders: small valid programs (GraphBuilder, affine, conv, mlp, matmul_chain, ...)
- api: the admin token, auth headers, tenants (in-process or over HTTP), error bodies
- uploads: one upload helper family, through an in-process app (TestClient) or over HTTP
- served: a real `graphgate serve` process on a free loopback port
- v2: KServe V2 binary requests
- realservers: real PostgreSQL, SeaweedFS (S3), Redis and nginx for the backend tests
- backends: the settings and environment that put a server test on the `postgres_s3` backend
- fairness, soak: the measures that tests bound and benchmarks report
- control_flow, bad_inputs: hand-written control flow and the catalogue of bad programs, each
  with the diagnostic code it must get

Helpers that need real Paddle live in tests/conformance (models, families, control_flow, ...).
"""
