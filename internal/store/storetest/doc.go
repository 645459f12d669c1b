// Package storetest is the conformance suite every store.Store backend must
// pass (STYLE.md: storetest.Run(t, factory)): ADR-0006 D3 and D4 as
// DESIGN.md "Branches", "Sequences, events and watch" and "Observers"
// decide them, plus the concurrency guarantees (8 writers x 1000 adds).
//
// Import rule: storetest imports internal/store and internal/envelope
// (and the standard library's testing) only; never grpc, internal/server
// or a particular backend.
package storetest
