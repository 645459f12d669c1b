package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
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
	err := d.s.inTx(ctx, func(tx pgx.Tx) error { return runQuerier(ctx, tx, fn) })
	if err == nil {
		d.s.exchangeWrote()
		if after != nil {
			after()
		}
	}
	return err
}

func (d exchangeDriver) Read(ctx context.Context, fn func(ctx context.Context, q exchangedb.Querier) error) error {
	return d.s.read(ctx, func(tx pgx.Tx) error { return runQuerier(ctx, tx, fn) })
}

// runQuerier runs fn on tx; statements fn led with and never followed go with the COMMIT.
func runQuerier(ctx context.Context, tx pgx.Tx, fn func(ctx context.Context, q exchangedb.Querier) error) error {
	q := &pgQuerier{tx: tx}
	if err := fn(ctx, q); err != nil {
		return err
	}
	if q.lead != nil {
		return commitWith(ctx, tx, q.takeLead())
	}
	return nil
}

// Notify queues owners for the notifier, which tells every replica after the commit.
func (d exchangeDriver) Notify(owners []uuid.UUID) { d.s.wake.notifyOwners(owners) }

// Listen hands the other replicas' exchange wake-ups to fn (nil owners: the listener
// reconnected). There may be other replicas: the Exchange also rechecks periodically.
func (d exchangeDriver) Listen(fn func(owners []uuid.UUID)) bool {
	d.s.wake.exchange.Store(&fn)
	return true
}

// pgQuerier is a transaction as exchangedb queries it: the ? placeholders rewritten, and round
// trips saved where the order allows. A statement goes out in one batch with the BEGIN when it
// is the transaction's first (lazyTx would send BEGIN alone first), and with the statements led
// in front of it (Lead); a batch's statements run one after another, each with a snapshot of its
// own under READ COMMITTED, so a lock led in front of a query is held before the query reads.
// Issue 17's benchmark: a Send+Collect round took 11 round trips, 5 with this and the fewer
// statements of exchangedb.
type pgQuerier struct {
	tx   pgx.Tx
	lead *pgx.Batch // statements to send in front of the next one
}

// batched reports whether the next statement goes out in a batch: with BEGIN or with leads.
func (q *pgQuerier) batched() bool {
	if q.lead != nil {
		return true
	}
	lt, ok := q.tx.(*lazyTx)
	return ok && !lt.begun && !lt.done
}

// takeLead returns the led statements (an empty batch for none) and forgets them.
func (q *pgQuerier) takeLead() *pgx.Batch {
	b := q.lead
	q.lead = nil
	if b == nil {
		b = &pgx.Batch{}
	}
	return b
}

// send sends the leads and query in one batch (BEGIN in front when the transaction has not
// begun) and reads the leads' results: the caller reads query's, then closes br.
func (q *pgQuerier) send(ctx context.Context, query string, args []any) (pgx.BatchResults, error) {
	b := q.takeLead()
	n := b.Len()
	b.Queue(rebind(query), args...)
	br := q.tx.SendBatch(ctx, b)
	for range n {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	return br, nil
}

func (q *pgQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if !q.batched() {
		tag, err := q.tx.Exec(ctx, rebind(query), args...)
		if err != nil {
			return 0, err
		}
		return tag.RowsAffected(), nil
	}
	br, err := q.send(ctx, query, args)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (q *pgQuerier) Query(ctx context.Context, query string, args ...any) (exchangedb.Rows, error) {
	if !q.batched() {
		return q.tx.Query(ctx, rebind(query), args...)
	}
	br, err := q.send(ctx, query, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (q *pgQuerier) QueryRow(ctx context.Context, query string, args ...any) exchangedb.Row {
	if !q.batched() {
		return q.tx.QueryRow(ctx, rebind(query), args...)
	}
	br, err := q.send(ctx, query, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{row: br.QueryRow(), br: br}
}

func (*pgQuerier) IsNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// Defer hands the statement to the COMMIT's batch (lazyTx, tx.go): one round trip for all of
// them and the COMMIT; a failure rolls the whole transaction back. Leads not yet sent go first.
func (q *pgQuerier) Defer(ctx context.Context, query string, args ...any) error {
	b := q.takeLead()
	b.Queue(rebind(query), args...)
	return commitWith(ctx, q.tx, b)
}

// Lead queues the statement in front of the next one (or the COMMIT): its result is not read,
// its error is the next statement's.
func (q *pgQuerier) Lead(ctx context.Context, query string, args ...any) error {
	if q.lead == nil {
		q.lead = &pgx.Batch{}
	}
	q.lead.Queue(rebind(query), args...)
	return nil
}

// batchRows are a batched query's rows; closing them closes the batch (the query was its last
// statement: what went wrong with it, Err reports).
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	_ = r.br.Close()
}

// batchRow is a batched one-row query; scanning it closes the batch.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

// rebinds caches exchangedb.Rebind's rewrite of each statement text: a few dozen texts, but
// those with IN lists vary with the list's length, so the cache stops growing at maxRebinds, and
// keeps no text longer than maxRebindLen (a broadcast's lock of hundreds of owners is tens of KB,
// rewritten in microseconds; kept, a thousand of them would pin tens of MB; review of issue 17's
// benchmark work).
var (
	rebinds  sync.Map // string -> string
	nRebinds atomic.Int64
)

const (
	maxRebinds   = 1024
	maxRebindLen = 2048
)

func rebind(query string) string {
	if s, ok := rebinds.Load(query); ok {
		return s.(string)
	}
	s := exchangedb.Rebind(query)
	if len(query) <= maxRebindLen && nRebinds.Load() < maxRebinds {
		if _, loaded := rebinds.LoadOrStore(query, s); !loaded {
			nRebinds.Add(1)
		}
	}
	return s
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
