// Package store will own branch histories: the MessageManager semantics of ADR-0006 D3 (membership,
// order, the single system record, add-or-replace at the same index), the per-branch event log with
// its sequences, the message-added observers of ADR-0006 D4, and the Store backends.
//
// Import rule (DESIGN.md "Layers"): store imports internal/envelope and no other package of this
// module, and never grpc or the generated proto code; conversion to and from the wire happens in
// internal/server.
package store
