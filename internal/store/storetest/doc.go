// Package storetest is the conformance suite every store.Store backend must
// pass (docs/development.md#style-tests: storetest.Run(t, factory)): ADR-0006 D3 and D4 as
// docs/design.md#branches, "Sequences, events and watch" and "Observers"
// decide them, plus the concurrency guarantees (8 writers x 1000 adds).
//
// Every engine runs every case except those gated by Capabilities: the
// memory-budget cases (MemoryBudget, RequestIDsWithinBudget,
// RequestIDsNotEvictedByBudget) run only on an engine with a memory
// budget (Memory), since an engine that keeps its data on disk (sqlite)
// never refuses a write with ErrMemoryBudget. Capabilities.Elsewhere moves
// a case to another pass of the same make target: the sqlite engine runs
// ScopesIsolated (130,000 sequential writes) without the race detector,
// which instruments all of SQLite and makes it take minutes.
//
// Import rule: storetest imports internal/store and internal/envelope
// (and the standard library's testing) only; never grpc, internal/server
// or a particular backend.
package storetest
