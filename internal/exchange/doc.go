// Package exchange will own mailbox routing between owners (ADR-0006 D5): flows, outboxes,
// per-sender inboxes, collect, dead letters and live delivery.
//
// Import rule (DESIGN.md "Layers"): exchange imports internal/envelope and no other package of this
// module, and never grpc or the generated proto code; conversion to and from the wire happens in
// internal/server.
package exchange
