package exchangedb

import (
	"context"

	"github.com/google/uuid"
)

// Querier runs the statements of one transaction. The SQL is written once, with ? placeholders
// (dialect.go); the PostgreSQL driver rewrites them with Rebind.
type Querier interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query; the caller closes the rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// QueryRow runs a query of at most one row; Scan reports ErrNoRows (the driver's) for none,
	// which IsNoRows recognises.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// IsNoRows reports whether err is the driver's "no rows" error.
	IsNoRows(err error) bool
	// Defer runs a statement whose result nothing reads before the commit, at the latest with
	// the commit, in the order deferred and after every statement run before it (PostgreSQL
	// sends deferred statements with the COMMIT: a round trip each saved; SQLite runs them at
	// once). Its error, if any, fails the commit and applies nothing. Statements run later must
	// not read what a deferred one writes.
	Defer(ctx context.Context, query string, args ...any) error
	// Lead runs a statement whose result nothing reads before the next statement of the
	// transaction (Exec, Query, QueryRow, a Defer'd one, or the COMMIT), in that statement's
	// round trip (PostgreSQL sends them in one batch, which runs them in order: a lock led in
	// front of a query is held before the query reads; SQLite runs it at once). Its error, if
	// any, is the next statement's.
	Lead(ctx context.Context, query string, args ...any) error
}

// Rows is a query's result.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a one-row query's result.
type Row interface{ Scan(dest ...any) error }

// Driver is what an engine gives the Exchange: transactions on its database, with its fault mapping
// and health, and wake-ups across its replicas.
type Driver interface {
	// Dialect names the database, for the few statements that differ (dialect.go).
	Dialect() Dialect
	// Write runs fn in one write transaction and, once it has committed, after (when not nil).
	// fn may run more than once (a batch re-run, a deadlock retried): it must set what it reports
	// afresh on each run. An error fn returns rolls the transaction back and is returned as it is;
	// the database's faults are mapped to the store's sentinels (store.ErrStorageUnavailable...).
	// after must not block: it runs on the engine's commit path.
	Write(ctx context.Context, fn func(ctx context.Context, q Querier) error, after func()) error
	// Read runs fn in one read transaction that sees one committed state.
	Read(ctx context.Context, fn func(ctx context.Context, q Querier) error) error
	// Notify tells the other replicas, after a commit, that mail landed in owners' inboxes or that
	// owners left. A single-process engine does nothing.
	Notify(owners []uuid.UUID)
	// Listen sets the function that receives the other replicas' wake-ups: the owners named, or
	// nil for "every subscribed owner" (the listener reconnected: wake-ups may have been lost).
	// Replicated reports whether there are other replicas at all (then the Exchange also re-reads
	// the subscribed inboxes periodically).
	Listen(fn func(owners []uuid.UUID)) (replicated bool)
}
