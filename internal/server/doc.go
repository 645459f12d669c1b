// Package server is historyd's gRPC layer: it owns the *grpc.Server and its lifecycle (health,
// reflection, graceful shutdown bounded by a grace period), the interceptor chain, the one mapping
// from domain errors to gRPC statuses (toStatus), and, as later issues add them, the thin service
// handlers and the proto <-> domain converters.
//
// It also owns what faces the network (issue 7): request ids, bearer-token authentication
// (auth.go), TLS and mutual TLS (tls.go), transport limits (limits.go), the lenient request codec
// that turns undecodable requests into INVALID_ARGUMENT (malformed.go), and the Prometheus metrics
// (metrics.go, metrics_domain.go); and, since issue 11 (ADR-0009), the tap that refuses a call from
// its headers before its body is read (tap.go: authentication and the in-flight request budget of
// inflight_budget.go), the connection cap (connlimit.go) and the registry of open streams that a
// credential reload or a certificate's expiry ends (revoke.go). Prometheus is imported here only: the
// domain packages expose plain Stats snapshots that the collectors read at scrape time. The
// interceptor order is written down in interceptors.go. testhook_on.go exists only in builds with the historyd_testhook tag.
//
// Import rule (docs/design.md#layers): server may import internal/envelope, internal/store,
// internal/exchange and gen/; it must not import cmd/. It is, with cmd/historyd, the only package of
// the service that imports grpc, and the only place where domain values and proto messages meet.
package server
