// Package store owns branch histories: LionAGI's MessageManager semantics
// (ADR-0006 D3) over a Store interface, the per-branch sequences and event
// log of docs/design.md#sequences, the message-added
// observers of ADR-0006 D4 (docs/design.md#observers), the subscriptions
// WatchBranch reads (replay then live, a kinds filter, bounded buffers, a
// limit on open ones; docs/decisions/0005), request-id
// idempotency and optimistic concurrency (docs/design.md#branches), LionAGI
// JSON import and export of whole branches, and the backends: the in-memory
// one (Memory) with its memory budget. Every backend must pass
// storetest.Run.
//
// The LionAGI rules live in one engine-neutral place, rules.go: a branch's
// state (BranchState) and an input in, the placements of one commit (Plan)
// out; ForkCopies and ForkPoint in fork.go, the import's ranks in
// ImportRanks. Engines do persistence, indexing, locking, idempotency
// records and budgets, and never write a rule again. The two SQL engines
// share what they do with their rows in memory (internal/store/sqlrow) and
// the JSON they store (internal/store/rowjson).
//
// A branch is one System pinned at index 0 followed by the other messages
// in insertion order; a message written again under its id is replaced at
// its index. Messages are envelope values and are never changed in place,
// so readers share them without copies.
//
// Import rule (docs/design.md#layers): store imports internal/envelope (and
// its jsonv) only: no grpc, protobuf, zap, internal/server or
// internal/exchange. Errors are sentinels (ErrX) or typed errors wrapping
// them; internal/server maps them to gRPC statuses.
package store
