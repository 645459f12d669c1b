// Package sqlite is the durable embedded store engine (issue 14,
// docs/design.md#storage): one SQLite database in a data directory, through
// modernc.org/sqlite (pure Go, no cgo), in WAL mode, with the schema of
// internal/store/migrations. One process per data directory: Open takes an
// exclusive lock on it and a second process is refused.
//
// Writes go through one writer goroutine that batches concurrent requests
// into one transaction (group commit), so concurrent writers share the
// fsync of --sync=full and the commit of --sync=normal. Reads come from the
// database; nothing is replayed into memory at start.
//
// Backup (backup.go) copies the database while it serves, in one read
// transaction (VACUUM INTO), for historyd backup (issue 15).
//
// Import rule (docs/design.md#layers): internal/store, internal/envelope,
// internal/store/migrations, what it shares with the PostgreSQL engine
// (internal/store/rowjson, internal/store/sqlrow), the SQLite driver and the
// standard library; never grpc, internal/server or zap.
package sqlite
