package postgres

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store/exchangedb"
)

// ExchangeDriver returns the exchangedb.Driver over this store's database (issue 17): writes are
// one READ COMMITTED transaction from the pool (deadlocks PostgreSQL broke are retried, as history
// writes are), reads one REPEATABLE READ READ ONLY transaction, both with the store's fault
// mapping and health. Wake-ups reach every replica through the store's notifier and listener
// (wake.go) on a channel of their own, never from inside the write transaction
// (docs/decisions/0017).
func (s *Store) ExchangeDriver() exchangedb.Driver { return exchangeDriver{s} }

type exchangeDriver struct{ s *Store }

func (exchangeDriver) Dialect() exchangedb.Dialect { return exchangedb.Postgres }

func (d exchangeDriver) Write(ctx context.Context, fn func(ctx context.Context, q exchangedb.Querier) error, after func()) error {
	err := d.s.inTx(ctx, func(tx pgx.Tx) error { return fn(ctx, pgQuerier{tx}) })
	if err == nil && after != nil {
		after()
	}
	return err
}

func (d exchangeDriver) Read(ctx context.Context, fn func(ctx context.Context, q exchangedb.Querier) error) error {
	return d.s.read(ctx, func(tx pgx.Tx) error { return fn(ctx, pgQuerier{tx}) })
}

// Notify queues owners for the notifier, which tells every replica after the commit.
func (d exchangeDriver) Notify(owners []uuid.UUID) { d.s.wake.notifyOwners(owners) }

// Listen hands the other replicas' exchange wake-ups to fn (nil owners: the listener
// reconnected). There may be other replicas: the Exchange also rechecks periodically.
func (d exchangeDriver) Listen(fn func(owners []uuid.UUID)) bool {
	d.s.wake.exchange.Store(&fn)
	return true
}

// pgQuerier is a transaction as exchangedb queries it: the ? placeholders rewritten.
type pgQuerier struct{ tx pgx.Tx }

func (q pgQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, exchangedb.Rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (q pgQuerier) Query(ctx context.Context, query string, args ...any) (exchangedb.Rows, error) {
	return q.tx.Query(ctx, exchangedb.Rebind(query), args...)
}

func (q pgQuerier) QueryRow(ctx context.Context, query string, args ...any) exchangedb.Row {
	return q.tx.QueryRow(ctx, exchangedb.Rebind(query), args...)
}

func (pgQuerier) IsNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// Defer hands the statement to the COMMIT's batch (lazyTx, tx.go): one round trip for all of
// them and the COMMIT; a failure rolls the whole transaction back.
func (q pgQuerier) Defer(ctx context.Context, query string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(exchangedb.Rebind(query), args...)
	return commitWith(ctx, q.tx, b)
}

// exchangeChannel is the NOTIFY channel of the Exchange's wake-ups. Channels belong to the
// database, not the schema, so a payload is the sender's schema, '|', then owner UUIDs,
// comma-separated; a listener drops the payloads of other schemas (deployments in different
// schemas of one database do not wake each other; review R4).
const exchangeChannel = "historyd_exchange"

// qNotifyExchange is the notifier's exchange wake-up, tagged with its connection's schema.
const qNotifyExchange = `SELECT pg_notify('` + exchangeChannel + `', coalesce(current_schema(), '') || '|' || $1)`

// qSchema is the listener's schema, compared with the payloads' (a schema name is at most 63
// bytes: the tag keeps a payload under PostgreSQL's 8000-byte limit).
const qSchema = `SELECT coalesce(current_schema(), '')`

// exchangeWake is the Exchange's part of wake: the owners to notify, and the function that
// receives the notifications.
type exchangeWake struct {
	exOut    map[uuid.UUID]struct{}
	exchange atomic.Pointer[func([]uuid.UUID)]
}

// notifyOwners queues owners for the notifier.
func (w *wake) notifyOwners(owners []uuid.UUID) {
	if len(owners) == 0 {
		return
	}
	w.mu.Lock()
	if w.exOut == nil {
		w.exOut = map[uuid.UUID]struct{}{}
	}
	for _, o := range owners {
		w.exOut[o] = struct{}{}
	}
	w.mu.Unlock()
	signal(w.outNew)
}

// takeOwners returns the queued owners as payloads under maxPayload.
func (w *wake) takeOwners() []string {
	w.mu.Lock()
	owners := w.exOut
	w.exOut = nil
	w.mu.Unlock()
	var (
		out []string
		b   strings.Builder
	)
	for o := range owners {
		if b.Len() > 0 && b.Len()+37 > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(o.String())
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// exchangeWoken hands a notification's owners (nil: all, after a reconnect) to the Exchange, when
// it comes from schema (the listener's).
func (w *wake) exchangeWoken(schema string, payload *string) {
	fn := w.exchange.Load()
	if fn == nil {
		return
	}
	if payload == nil {
		(*fn)(nil)
		return
	}
	i := strings.LastIndexByte(*payload, '|') // UUIDs have no '|'; a quoted schema name may
	if i < 0 || (*payload)[:i] != schema {
		return
	}
	var owners []uuid.UUID
	for _, p := range strings.Split((*payload)[i+1:], ",") {
		if id, err := uuid.Parse(p); err == nil {
			owners = append(owners, id)
		}
	}
	if len(owners) > 0 {
		(*fn)(owners)
	}
}

// notifyExchangeBatch is notifyBatch for the exchange channel.
func notifyExchangeBatch(payload string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue("set local synchronous_commit to off")
	b.Queue(qNotifyExchange, payload)
	b.Queue("commit")
	return b
}
