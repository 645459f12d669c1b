package exchangedb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// forDBEngines runs f on the sqlite and the PostgreSQL engine (PostgreSQL skipped where none
// answers, pgtest); open builds the engine with the options over a driver wrap makes (nil: the
// store's own).
func forDBEngines(t *testing.T, f func(t *testing.T, open func(opts []exchange.Option, wrap func(exchangedb.Driver) exchangedb.Driver) *exchangedb.Engine)) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			f(t, func(opts []exchange.Option, wrap func(exchangedb.Driver) exchangedb.Driver) *exchangedb.Engine {
				var d exchangedb.Driver
				if name == "sqlite" {
					s := openSQLite(t, t.TempDir())
					t.Cleanup(func() { _ = s.Close() })
					d = s.ExchangeDriver()
				} else {
					s := openPostgres(t, pgtest.New(t))
					t.Cleanup(func() { _ = s.Close() })
					d = s.ExchangeDriver()
				}
				if wrap != nil {
					d = wrap(d)
				}
				e := exchangedb.New(d, opts)
				t.Cleanup(func() { _ = e.Close() })
				return e
			})
		})
	}
}

// TestQueuedNULRecipientBecomesADeadLetter pins docs/decisions/0012 row 24 for outboxes written
// before Send refused a recipient holding U+0000: the collect makes it a dead letter of the sender
// (reason not a UUID, its recipient exactly as sent) on PostgreSQL too, where the dead letter's
// recipient column refused the NUL (SQLSTATE 22021) and every collect of the sender failed for
// ever, leaving the good mail queued with it undelivered.
func TestQueuedNULRecipientBecomesADeadLetter(t *testing.T) {
	forDBEngines(t, func(t *testing.T, open func([]exchange.Option, func(exchangedb.Driver) exchangedb.Driver) *exchangedb.Engine) {
		e := open(nil, nil)
		a, b := uuid.New(), uuid.New()
		register(t, e, a, b)
		bad, err := e.QueueUnchecked(tctx(t), a, "x\x00")
		if err != nil {
			t.Fatal(err)
		}
		send(t, e, a, envelope.IDParticipant(b), "good")
		rep, err := e.Collect(tctx(t), a, exchange.ReportOptions{})
		if err != nil {
			t.Fatalf("Collect: %v", err)
		}
		if rep.Delivered != 1 || rep.Drops != 1 {
			t.Errorf("report: delivered %d, drops %d; want 1 and 1", rep.Delivered, rep.Drops)
		}
		page, err := e.DeadLetters(tctx(t), a, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Letters) != 1 || page.Letters[0].Message.ID != bad || page.Letters[0].Recipient.String() != "x\x00" ||
			page.Letters[0].Reason != exchange.ReasonNotUUID {
			t.Fatalf("dead letters %+v, want %s for %q (not a UUID)", page.Letters, bad, "x\x00")
		}
		if got, err := e.ReceivePage(tctx(t), b, nil, exchange.Cursor{}, 0); err != nil || len(got.Messages) != 1 {
			t.Errorf("B received %d messages (%v), want the good one", len(got.Messages), err)
		}
		if _, err := e.CollectAll(tctx(t), exchange.ReportOptions{}); err != nil {
			t.Errorf("CollectAll: %v", err)
		}
	})
}

// TestCollectAllGoesOnPastAFailingOwner: an owner whose collect fails (here a damaged row) does not
// keep the other owners' mail queued; CollectAll collects them and returns the failure after
// (exchange_service.proto, CollectAll; docs/decisions/0012 row 24: one owner's poisoned outbox
// blocked everyone's).
func TestCollectAllGoesOnPastAFailingOwner(t *testing.T) {
	forDBEngines(t, func(t *testing.T, open func([]exchange.Option, func(exchangedb.Driver) exchangedb.Driver) *exchangedb.Engine) {
		e := open(nil, nil)
		a, b, c := uuid.New(), uuid.New(), uuid.New()
		register(t, e, a, b, c) // a first: its failure comes before c's turn
		if err := e.DamageBody(tctx(t), send(t, e, a, envelope.IDParticipant(b), "damaged").ID); err != nil {
			t.Fatal(err)
		}
		send(t, e, c, envelope.IDParticipant(b), "from c")
		all, err := e.CollectAll(tctx(t), exchange.ReportOptions{})
		if !errors.Is(err, store.ErrStorageDamaged) {
			t.Errorf("CollectAll: %v, want a's failure (store.ErrStorageDamaged)", err)
		}
		if all == nil || all.Delivered != 1 {
			t.Errorf("CollectAll report %+v, want c's delivery", all)
		}
		if got, err := e.ReceivePage(tctx(t), b, &c, exchange.Cursor{}, 0); err != nil || len(got.Messages) != 1 {
			t.Errorf("B received %d messages from c (%v), want 1", len(got.Messages), err)
		}
	})
}

// writeSignals signals each write on writes (never blocking).
type writeSignals struct {
	exchangedb.Driver
	writes chan struct{}
}

func (d *writeSignals) Write(ctx context.Context, fn func(context.Context, exchangedb.Querier) error, after func()) error {
	err := d.Driver.Write(ctx, fn, after)
	select {
	case d.writes <- struct{}{}:
	default:
	}
	return err
}

// TestBackgroundCollectFailureReported: a background collect that keeps failing is reported to the
// failure handler (cmd/historyd logs a warning with the owner and the error) at most once per
// owner per exchange.CollectFailureReportEvery, while the collector retries; before, it failed
// silently for ever (docs/decisions/0012 row 24).
func TestBackgroundCollectFailureReported(t *testing.T) {
	forDBEngines(t, func(t *testing.T, open func([]exchange.Option, func(exchangedb.Driver) exchangedb.Driver) *exchangedb.Engine) {
		type failure struct {
			owner uuid.UUID
			err   error
		}
		reports := make(chan failure, 16)
		clock := exchangetest.NewClock(time.Date(2026, 12, 8, 9, 0, 0, 0, time.UTC))
		var d *writeSignals
		e := open([]exchange.Option{exchange.WithBackgroundCollection(true), exchange.WithClock(clock.Now),
			exchange.WithCollectFailureHandler(func(owner uuid.UUID, err error) { reports <- failure{owner, err} })},
			func(inner exchangedb.Driver) exchangedb.Driver {
				d = &writeSignals{Driver: inner, writes: make(chan struct{}, 1024)}
				return d
			})
		a, b := uuid.New(), uuid.New()
		register(t, e, a, b)
		// Queued without a Send, so the collector has not heard of it; damaged, then kicked.
		id, err := e.QueueUnchecked(tctx(t), a, b.String())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.DamageBody(tctx(t), id); err != nil {
			t.Fatal(err)
		}
		send(t, e, a, envelope.IDParticipant(b), "kick")
		wait := func(what string) failure {
			t.Helper()
			select {
			case f := <-reports:
				return f
			case <-tctx(t).Done():
				t.Fatalf("no report %s", what)
			}
			return failure{}
		}
		if f := wait("of the failing collect"); f.owner != a || !errors.Is(f.err, store.ErrStorageDamaged) {
			t.Fatalf("reported %s: %v, want %s's damaged row", f.owner, f.err, a)
		}
		// Three more failed attempts (each a write the collector retries), none reported.
		for range 3 {
			for len(d.writes) > 0 {
				<-d.writes
			}
			select {
			case <-d.writes:
			case <-tctx(t).Done():
				t.Fatal("the collector stopped retrying")
			}
		}
		select {
		case f := <-reports:
			t.Fatalf("reported again within the interval: %s %v", f.owner, f.err)
		default:
		}
		clock.Add(exchange.CollectFailureReportEvery)
		if f := wait("after the interval"); f.owner != a {
			t.Errorf("reported %s, want %s", f.owner, a)
		}
	})
}
