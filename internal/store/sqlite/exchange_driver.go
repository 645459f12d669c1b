package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store/exchangedb"
)

// ExchangeDriver returns the exchangedb.Driver over this store's database (issue 17): the
// Exchange's writes go through the single writer (writer.go), so they group-commit with history
// writes and share its fault mapping and health; its reads use the read pool. There is one
// process, so wake-ups are the Exchange's own (Notify does nothing).
func (s *Store) ExchangeDriver() exchangedb.Driver { return exchangeDriver{s} }

type exchangeDriver struct{ s *Store }

func (exchangeDriver) Dialect() exchangedb.Dialect { return exchangedb.SQLite }

// Write runs fn on the writer without a savepoint of its own (writer.doUnguardedAsync), as the
// branch writes do: a savepoint cost each Exchange write two statements more and a copy of every
// page it first touched (SQLite's statement journal), about a tenth of a Send+Collect round's CPU
// (issue 17's benchmark). What a failed fn wrote cannot then be undone alone, so the querier
// notes the statements that may have written (any but a SELECT) and SQLite's errors: fn's error
// after either is a dirtyError, and the writer rolls the batch back and runs its other writes
// again without it (fn may run more than once: Driver.Write). An fn that fails before its first
// write, as the Exchange's checks do, leaves nothing to undo and fails alone.
func (d exchangeDriver) Write(ctx context.Context, fn func(ctx context.Context, q exchangedb.Querier) error, after func()) error {
	if d.s.closed.Load() {
		return ErrClosed
	}
	return d.s.w.doUnguardedAsync(ctx, func(ctx context.Context, tx *sql.Tx) error {
		q := &sqlQuerier{tx: tx, stmt: func(ctx context.Context, q string) (*sql.Stmt, error) {
			return d.s.ex.writeStmt(ctx, d.s.w.conn, tx, q)
		}, track: true}
		err := fn(ctx, q)
		switch {
		case err != nil && (q.dirty || resultCode(err) != 0):
			return dirtyError{err}
		case err == nil && !q.dirty: // a repeat answered from its record, or a read
			return errWroteNothing
		}
		return err
	}, after)()
}

func (d exchangeDriver) Read(ctx context.Context, fn func(ctx context.Context, q exchangedb.Querier) error) error {
	return d.s.read(ctx, func(tx *sql.Tx) error {
		return fn(ctx, &sqlQuerier{tx: tx, stmt: func(ctx context.Context, q string) (*sql.Stmt, error) {
			return d.s.ex.readStmt(ctx, tx, q)
		}})
	})
}

// maxExchangeStmts bounds the statements kept prepared per side; past it (queries with long IN
// lists vary in text), a statement is prepared for its transaction only.
const maxExchangeStmts = 256

// exchangeStmts keeps the Exchange's statements prepared: parsing every statement of every write
// cost more than the write (as stmtCache found for history). Its queries are exchangedb's, not
// known at Open, so they are prepared on first use, on the writer's own connection, from the writer
// goroutine inside its transaction (the writer holds the only write connection).
//
// The statements run as prepared on the connection, not bound to each transaction with
// Tx.StmtContext: database/sql re-prepares a statement of a Conn in every transaction it is bound
// to (Tx.StmtContext reuses only statements of the DB), so the cache only spared the re-parsing
// within one batch (review17 R11). Run on the connection, a statement is in the writer's
// transaction all the same: a SQLite transaction is its connection's state, and the writer
// begins every transaction on this connection (writer.go) and runs the Exchange's writes only
// inside one, from its own goroutine.
type exchangeStmts struct {
	mu    sync.Mutex
	write map[string]*sql.Stmt
	// tx and txm are the statements prepared for the writer's current transaction alone, once
	// write is full (writer goroutine only).
	tx  *sql.Tx
	txm map[string]*sql.Stmt
}

func (c *exchangeStmts) writeStmt(ctx context.Context, conn *sql.Conn, tx *sql.Tx, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	st, ok := c.write[q]
	full := len(c.write) >= maxExchangeStmts
	c.mu.Unlock()
	if ok {
		return st, nil
	}
	if full {
		if c.tx != tx {
			c.tx, c.txm = tx, map[string]*sql.Stmt{}
		}
		if st, ok := c.txm[q]; ok {
			return st, nil
		}
		st, err := tx.PrepareContext(context.Background(), q) // closed with the transaction; kept for the batch
		if err != nil {
			return nil, err
		}
		c.txm[q] = st
		return st, nil
	}
	st, err := conn.PrepareContext(context.Background(), q) // kept: never bound to one caller's context
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.write == nil {
		c.write = map[string]*sql.Stmt{}
	}
	c.write[q] = st
	c.mu.Unlock()
	return st, nil
}

// readStmt prepares q on the read transaction's own connection. Reads keep no cache: a statement
// kept for the pool is prepared on a connection of its own, and a read that waited for one while
// holding its own could starve the pool (two readers, each waiting for the other's connection).
func (c *exchangeStmts) readStmt(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	return tx.PrepareContext(ctx, q)
}

func (exchangeDriver) Notify([]uuid.UUID) {}

func (exchangeDriver) Listen(func([]uuid.UUID)) bool { return false }

// sqlQuerier is a transaction as exchangedb queries it, through prepared statements.
type sqlQuerier struct {
	tx   *sql.Tx
	stmt func(ctx context.Context, query string) (*sql.Stmt, error)
	// track: note in dirty whether the transaction may have been written to (a statement other
	// than a SELECT ran, or one met SQLite's error): Write's unguarded fn (writer goroutine only).
	track bool
	dirty bool
}

// ran returns err, noting SQLite's error (some end the transaction, and a failed statement may
// leave the job's earlier ones in it).
func (q *sqlQuerier) ran(err error) error {
	if q.track && err != nil && resultCode(err) != 0 {
		q.dirty = true
	}
	return err
}

// writes notes that query may write: anything but a SELECT (an UPDATE ... RETURNING is run by
// QueryRow).
func (q *sqlQuerier) writes(query string) {
	if q.track && !q.dirty && !isSelect(query) {
		q.dirty = true
	}
}

// isSelect reports whether query starts with SELECT (leading blanks skipped).
func isSelect(query string) bool {
	query = strings.TrimLeft(query, " \t\r\n")
	return len(query) >= 6 && strings.EqualFold(query[:6], "SELECT")
}

func (q *sqlQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := q.stmt(ctx, query)
	if err != nil {
		return 0, q.ran(err)
	}
	was := q.dirty
	q.writes(query)
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, q.ran(err)
	}
	n, err := res.RowsAffected()
	if err == nil && n == 0 {
		// It changed no row, so it wrote nothing: a guarded DELETE or UPDATE that matched none,
		// an INSERT ... ON CONFLICT DO NOTHING that conflicted. A Send repeated while its first
		// attempt was in flight runs two of those and reads its answer from the record: it
		// wrote nothing, and goes on when its batch's commit fails for want of space (writer.go).
		// The count is SQLite's changes(), exact for an INSERT, UPDATE or DELETE while the
		// Exchange's tables have no trigger and no AUTOINCREMENT (a conflicting insert into one
		// would still move sqlite_sequence) and no DDL runs here: keep it so, or drop this.
		q.dirty = was
	}
	return n, err
}

func (q *sqlQuerier) Query(ctx context.Context, query string, args ...any) (exchangedb.Rows, error) {
	st, err := q.stmt(ctx, query)
	if err != nil {
		return nil, q.ran(err)
	}
	q.writes(query)
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, q.ran(err)
	}
	return sqlRows{rows, q}, nil
}

func (q *sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) exchangedb.Row {
	st, err := q.stmt(ctx, query)
	if err != nil {
		return errRow{q.ran(err)}
	}
	// A DML statement run by QueryRow (UPDATE or INSERT ... RETURNING) that returns no row
	// changed none (the schema has no triggers): its Scan decides whether it wrote, so that a
	// guarded update that matched nothing (Send to a full outbox) refuses alone, its batch not
	// re-run.
	return trackedRow{st.QueryRowContext(ctx, args...), q, !isSelect(query)}
}

func (*sqlQuerier) IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// Defer runs the statement now: SQLite has no round trips to save.
func (q *sqlQuerier) Defer(ctx context.Context, query string, args ...any) error {
	_, err := q.Exec(ctx, query, args...)
	return err
}

// Lead runs the statement now, as Defer does.
func (q *sqlQuerier) Lead(ctx context.Context, query string, args ...any) error {
	return q.Defer(ctx, query, args...)
}

type sqlRows struct {
	*sql.Rows
	q *sqlQuerier
}

func (r sqlRows) Scan(dest ...any) error { return r.q.ran(r.Rows.Scan(dest...)) }
func (r sqlRows) Err() error             { return r.q.ran(r.Rows.Err()) }
func (r sqlRows) Close()                 { r.Rows.Close() } //nolint:errcheck // Err reports what reading them met

// trackedRow is a QueryRow's result whose SQLite error marks the querier dirty, as does a row
// (or any error but no rows) of a statement that may write.
type trackedRow struct {
	row    *sql.Row
	q      *sqlQuerier
	writes bool
}

func (r trackedRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if r.writes && r.q.track && !errors.Is(err, sql.ErrNoRows) {
		r.q.dirty = true
	}
	return r.q.ran(err)
}
