package sqlite

import (
	"context"
	"database/sql"
	"errors"

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

func (d exchangeDriver) Write(ctx context.Context, fn func(ctx context.Context, q exchangedb.Querier) error, after func()) error {
	if d.s.closed.Load() {
		return ErrClosed
	}
	return d.s.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, sqlQuerier{tx}) }, after)
}

func (d exchangeDriver) Read(ctx context.Context, fn func(ctx context.Context, q exchangedb.Querier) error) error {
	return d.s.read(ctx, func(tx *sql.Tx) error { return fn(ctx, sqlQuerier{tx}) })
}

func (exchangeDriver) Notify([]uuid.UUID) {}

func (exchangeDriver) Listen(func([]uuid.UUID)) bool { return false }

// sqlQuerier is a transaction as exchangedb queries it.
type sqlQuerier struct{ tx *sql.Tx }

func (q sqlQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q sqlQuerier) Query(ctx context.Context, query string, args ...any) (exchangedb.Rows, error) {
	rows, err := q.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (q sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) exchangedb.Row {
	return q.tx.QueryRowContext(ctx, query, args...)
}

func (sqlQuerier) IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() } //nolint:errcheck // Err reports what reading them met
