"""KServe V2 over gRPC (the Open Inference Protocol's `inference.GRPCInferenceService`, and
`grpc.health.v1`): an interface beside server/routes, over the same services. See
docs/architecture.md and server/grpc/server.py."""
