"""What several test modules and benchmarks share; no test module imports another.

- builders: small valid programs (GraphBuilder, affine, conv, mlp, matmul_chain, ...)
- api: the admin token, auth headers, tenants (in-process or over HTTP), error bodies
- uploads: one upload helper family, through an in-process app (TestClient) or over HTTP
- served: a real `graphgate serve` process on a free loopback port
- realservers: real PostgreSQL, SeaweedFS (S3), Redis and nginx for the backend tests
- backends: the settings and environment that put a test on the `postgres_s3` backend
- fairness, soak: the measuring harnesses the tests and their benchmarks share
- bad_inputs, bad_control_flow: the catalogues of bad programs and their diagnostic codes
- control_flow: the well-formed cond and while programs Paddle exports, built by hand

tests/test_layout.py fails if a module under tests/ or benchmarks/ imports a test module.
"""
