// Package server is historyd's gRPC layer: it owns the *grpc.Server and its lifecycle (health,
// reflection, graceful shutdown bounded by a grace period), the interceptor chain, the one mapping
// from domain errors to gRPC statuses (toStatus), and, as later issues add them, the thin service
// handlers and the proto <-> domain converters.
//
// Import rule (DESIGN.md "Layers"): server may import internal/envelope, internal/store,
// internal/exchange and gen/; it must not import cmd/. It is, with cmd/historyd, the only package of
// the service that imports grpc, and the only place where domain values and proto messages meet.
package server
