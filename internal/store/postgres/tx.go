package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lazyTx is a transaction on a connection acquired from the pool whose
// BEGIN and COMMIT ride with its statements (issue 16's benchmark: on a
// small machine a write is bounded by its round trips). BEGIN goes out in
// front of the first batch (a first Exec or Query sends it alone); the
// statements handed to commitWith go out with the COMMIT, in one batch. So
// a plain write is two round trips: [BEGIN, the locked row, the recall],
// then [the writes, COMMIT].
//
// A statement of the commit's batch that fails aborts the transaction
// (PostgreSQL skips the rest of the batch, COMMIT included): Commit rolls
// it back and reports that statement's error, and nothing was applied. A
// connection lost while the batch is out is a commit without an answer,
// which tryTx maps to commitError as for a lone COMMIT.
//
// It is used by one goroutine (the call's); Commit or Rollback releases the
// connection to the pool.
type lazyTx struct {
	conn    *pgxpool.Conn
	begin   string // the BEGIN statement, with the options' isolation and access mode
	begun   bool
	done    bool
	pending *pgx.Batch // statements sent with the COMMIT
}

var _ pgx.Tx = (*lazyTx)(nil)

// errTxDone is a use of a lazyTx after its Commit or Rollback.
var errTxDone = errors.New("postgres: the transaction is over")

func newLazyTx(conn *pgxpool.Conn, opts pgx.TxOptions) *lazyTx {
	return &lazyTx{conn: conn, begin: beginSQL(opts)}
}

// beginSQL is the BEGIN statement for opts (the two modes the store uses,
// and the others pgx knows).
func beginSQL(opts pgx.TxOptions) string {
	sql := "begin"
	if opts.IsoLevel != "" {
		sql += " isolation level " + string(opts.IsoLevel)
	}
	if opts.AccessMode != "" {
		sql += " " + string(opts.AccessMode)
	}
	if opts.DeferrableMode != "" {
		sql += " " + string(opts.DeferrableMode)
	}
	return sql
}

// start sends BEGIN alone, before a statement that is not a batch.
func (t *lazyTx) start(ctx context.Context) error {
	switch {
	case t.done:
		return errTxDone
	case t.begun:
		return nil
	}
	t.begun = true
	_, err := t.conn.Exec(ctx, t.begin)
	return err
}

// withBegin returns b with BEGIN queued first when the transaction has not
// begun: the caller reads BEGIN's result first.
func (t *lazyTx) withBegin(b *pgx.Batch) (*pgx.Batch, bool) {
	if t.begun {
		return b, false
	}
	t.begun = true
	nb := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	nb.Queue(t.begin)
	nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	return nb, true
}

// SendBatch sends b, with BEGIN in front of it if the transaction has not
// begun (one round trip for both).
func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.done {
		return pgx.FailedBatchResults(b, errTxDone)
	}
	nb, begins := t.withBegin(b)
	br := t.conn.SendBatch(ctx, nb)
	if begins {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return pgx.FailedBatchResults(b, err)
		}
	}
	return br
}

// commitWith hands b to the COMMIT: its statements are sent with it, in
// one batch, instead of on their own.
func (t *lazyTx) commitWith(b *pgx.Batch) {
	if t.pending == nil {
		t.pending = &pgx.Batch{}
	}
	t.pending.QueuedQueries = append(t.pending.QueuedQueries, b.QueuedQueries...)
}

// Commit sends the pending statements and COMMIT in one batch (BEGIN in
// front if nothing was sent yet; nothing at all for a transaction that
// sent and queued nothing). A statement that fails is reported, and the
// transaction rolled back.
func (t *lazyTx) Commit(ctx context.Context) error {
	if t.done {
		return errTxDone
	}
	b := t.pending
	if b == nil {
		if !t.begun {
			t.finish()
			return nil
		}
		b = &pgx.Batch{}
	}
	t.pending = nil
	b.Queue("commit")
	nb, begins := t.withBegin(b)
	br := t.conn.SendBatch(ctx, nb)
	_ = begins // BEGIN's result is read as the others'
	err := readCommit(br, len(nb.QueuedQueries))
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.rollback(ctx)
		return err
	}
	t.finish()
	return nil
}

// readCommit reads the n results of a commit batch: the first error, or a
// COMMIT that answered ROLLBACK (the transaction had failed before).
func readCommit(br pgx.BatchResults, n int) error {
	for i := range n {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if i == n-1 && tag.String() != "COMMIT" {
			return pgx.ErrTxCommitRollback
		}
	}
	return nil
}

// Rollback ends the transaction without applying it; after Commit it does
// nothing. Its error is the ROLLBACK's (the connection is then closed by
// the pool, which never reuses one left inside a transaction).
func (t *lazyTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	return t.rollback(ctx)
}

func (t *lazyTx) rollback(ctx context.Context) error {
	var err error
	if t.conn.Conn().PgConn().TxStatus() != 'I' && !t.conn.Conn().IsClosed() {
		_, err = t.conn.Exec(ctx, "rollback")
	}
	t.finish()
	return err
}

// finish releases the connection: the pool closes one still inside a
// transaction or broken.
func (t *lazyTx) finish() {
	if !t.done {
		t.done = true
		t.conn.Release()
	}
}

func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	return nil, errors.New("postgres: nested transactions are not used")
}

func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.start(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, cols, src)
}

func (t *lazyTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Conn().Prepare(ctx, name, sql)
}

func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.start(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.conn.Exec(ctx, sql, args...)
}

func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.start(ctx); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.start(ctx); err != nil {
		return errRow{err}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t *lazyTx) Conn() *pgx.Conn { return t.conn.Conn() }

// errRow is a Row whose query never ran.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
