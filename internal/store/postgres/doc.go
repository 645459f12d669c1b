// Package postgres is the PostgreSQL engine of store.Store (issue 16): any
// number of historyd replicas serve one history from one database, and
// behave as one server. It keeps the SQLite engine's schema (the same
// migrations in the postgres dialect) and runs the engine-neutral rules of
// internal/store (rules.go) inside one READ COMMITTED transaction per
// write, serialised per branch by the branch row's lock (SELECT ... FOR
// UPDATE), never by a read of the history. Reads that need one view run in
// a REPEATABLE READ READ ONLY transaction; no replica caches rows across
// calls, so a write acknowledged by one replica is read by every other.
//
// Subscriptions live in the replica that serves them (handles.go); commits
// made elsewhere reach them by a NOTIFY sent after the commit, outside any
// write transaction, coalesced per branch (wake.go), and a periodic sweep
// of the watched branches' heads makes up for any wake-up lost.
// docs/decisions/0017-postgres-engine.md says why.
//
// Import rule: internal/store, internal/store/migrations, internal/envelope,
// what it shares with the SQLite engine (internal/store/rowjson,
// internal/store/sqlrow), pgx/v5 (and its stdlib adapter for goose), goose,
// uuid and the standard library. Proto types never come here.
package postgres
