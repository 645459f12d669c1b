package exchangedb_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// countingDriver counts the write transactions and the statements of each that did not go with
// the COMMIT (each a round trip, or a batch's part of one).
type countingDriver struct {
	exchangedb.Driver
	mu     sync.Mutex
	writes int
	now    int // statements that ran before the COMMIT, in every write
}

func (d *countingDriver) Write(ctx context.Context, fn func(context.Context, exchangedb.Querier) error, after func()) error {
	d.mu.Lock()
	d.writes++
	d.mu.Unlock()
	return d.Driver.Write(ctx, func(ctx context.Context, q exchangedb.Querier) error {
		return fn(ctx, countingQuerier{Querier: q, d: d})
	}, after)
}

type countingQuerier struct {
	exchangedb.Querier
	d *countingDriver
}

func (q countingQuerier) count() {
	q.d.mu.Lock()
	q.d.now++
	q.d.mu.Unlock()
}

func (q countingQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	q.count()
	return q.Querier.Exec(ctx, query, args...)
}

func (q countingQuerier) Query(ctx context.Context, query string, args ...any) (exchangedb.Rows, error) {
	q.count()
	return q.Querier.Query(ctx, query, args...)
}

func (q countingQuerier) QueryRow(ctx context.Context, query string, args ...any) exchangedb.Row {
	q.count()
	return q.Querier.QueryRow(ctx, query, args...)
}

func (d *countingDriver) take() (writes, now int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	writes, now = d.writes, d.now
	d.writes, d.now = 0, 0
	return writes, now
}

// rowCount counts the rows of table in url's schema.
func rowCount(t *testing.T, url, table string) int {
	t.Helper()
	conn, err := pgx.Connect(tctx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(tctx(t), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// On PostgreSQL a Send without a request id is one transaction whose statements all go with its
// COMMIT (one round trip); an unregistered sender and a full outbox are refused by that
// transaction, which applies nothing, and are then told apart by the statements of a second
// one, with the memory engine's errors.
func TestPostgresSendInOneRoundTrip(t *testing.T) {
	url := pgtest.New(t)
	s := openPostgres(t, url)
	defer s.Close()
	d := &countingDriver{Driver: s.ExchangeDriver()}
	e := exchangedb.New(d, []exchange.Option{exchange.WithMaxOutbox(1)})
	defer e.Close()
	ctx := tctx(t)
	a, b, stranger := uuid.New(), uuid.New(), uuid.New()
	for _, o := range []uuid.UUID{a, b} {
		if _, err := e.Register(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	d.take()
	send := func(from uuid.UUID) error {
		_, err := e.Send(ctx, exchange.SendRequest{Sender: from, Recipient: envelope.IDParticipant(b), Content: jsonv.StringValue("hi")})
		return err
	}
	if err := send(a); err != nil {
		t.Fatal(err)
	}
	if w, n := d.take(); w != 1 || n != 0 {
		t.Fatalf("a Send: %d writes, %d statements before the COMMIT; want 1 and 0", w, n)
	}
	err := send(a)
	var full *exchange.OutboxFullError
	if !errors.As(err, &full) || full.Queued != 1 || full.Limit != 1 {
		t.Fatalf("a Send into a full outbox = %v, want OutboxFullError 1 of 1", err)
	}
	if w, _ := d.take(); w != 2 {
		t.Fatalf("a refused Send: %d writes, want 2 (the refused one, then the one that says why)", w)
	}
	if err := send(stranger); !errors.Is(err, exchange.ErrOwnerNotRegistered) || err.Error() != "Sender "+stranger.String()+" not registered" {
		t.Fatalf("a Send by an unregistered sender = %v", err)
	}
	for table, want := range map[string]int{"exchange_messages": 1, "exchange_ledger": 1} {
		if n := rowCount(t, url, table); n != want {
			t.Errorf("%s holds %d rows, want %d: a refused Send applied something", table, n, want)
		}
	}
	rep, err := e.Collect(ctx, a, exchange.ReportOptions{})
	if err != nil || rep.Delivered != 1 {
		t.Fatalf("Collect = %+v, %v; want the one message delivered", rep, err)
	}
	if err := send(a); err != nil {
		t.Fatalf("a Send after the collect emptied the outbox: %v", err)
	}
}
