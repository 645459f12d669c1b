package exchangedb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// deadlockSpy wraps a Driver and counts the deadlocks PostgreSQL reported to any statement of a
// write (the store retries them, which would hide them from the caller).
type deadlockSpy struct {
	exchangedb.Driver
	mu        sync.Mutex
	deadlocks int
}

func (d *deadlockSpy) Write(ctx context.Context, fn func(context.Context, exchangedb.Querier) error, after func()) error {
	return d.Driver.Write(ctx, func(ctx context.Context, q exchangedb.Querier) error {
		err := fn(ctx, q)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40P01" {
			d.mu.Lock()
			d.deadlocks++
			d.mu.Unlock()
		}
		return err
	}, after)
}

func (d *deadlockSpy) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deadlocks
}

// twoReplicas opens two postgres stores over one schema, each with its Engine: two replicas of
// one server (issue 17: "replicas must behave as one server").
func twoReplicas(t *testing.T, opts ...exchange.Option) (a, b *exchangedb.Engine, spies [2]*deadlockSpy) {
	t.Helper()
	url := pgtest.New(t)
	var es [2]*exchangedb.Engine
	for i := range es {
		s := openPostgres(t, url)
		t.Cleanup(func() { _ = s.Close() })
		spies[i] = &deadlockSpy{Driver: s.ExchangeDriver()}
		es[i] = exchangedb.New(spies[i], opts, exchangedb.WithRecheckInterval(500*time.Millisecond))
		t.Cleanup(func() { _ = es[i].Close() })
	}
	return es[0], es[1], spies
}

func send(t *testing.T, e exchange.Service, from uuid.UUID, to envelope.Participant, text string) *envelope.Message {
	t.Helper()
	m, err := e.Send(tctx(t), exchange.SendRequest{Sender: from, Recipient: to, Content: jsonv.StringValue(text)})
	if err != nil {
		t.Fatalf("Send(%s): %v", text, err)
	}
	return m
}

func register(t *testing.T, e exchange.Service, owners ...uuid.UUID) {
	t.Helper()
	for _, o := range owners {
		if _, err := e.Register(tctx(t), o); err != nil {
			t.Fatalf("Register(%s): %v", o, err)
		}
	}
}

// ledgerStates counts the ledger's rows by state, failing on a row of an unknown message.
func ledgerStates(t *testing.T, e exchange.Ledgered, sent map[uuid.UUID]bool) map[exchange.LedgerState]int {
	t.Helper()
	entries, err := e.Ledger(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[exchange.LedgerState]int{}
	for _, le := range entries {
		if !sent[le.Message] {
			t.Errorf("ledger row of message %s, which no acknowledged Send returned", le.Message)
		}
		out[le.State]++
	}
	return out
}

// Issue 17: "postgres: two replicas: owners registered on A, Sends through B, Collect on A, Receive
// and Pop on B; SubscribeInbox on B sees deliveries collected on A; concurrent PopMessage calls for
// the same inbox on different replicas never return the same message".
func TestReplicasAreOnePostOffice(t *testing.T) {
	ra, rb, _ := twoReplicas(t)
	ctx := tctx(t)
	alice, bob := uuid.New(), uuid.New()
	register(t, ra, alice, bob)

	sub, unsubscribe, err := rb.Subscribe(ctx, bob, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()

	const n = 60
	sent := map[uuid.UUID]bool{}
	var order []uuid.UUID
	for i := range n {
		m := send(t, rb, alice, envelope.IDParticipant(bob), fmt.Sprint("m", i))
		sent[m.ID] = true
		order = append(order, m.ID)
	}
	if st := ledgerStates(t, ra, sent); st[exchange.LedgerOutbox] != n {
		t.Fatalf("ledger after %d Sends through B, read on A: %v, want %d outbox rows", n, st, n)
	}
	rep, err := ra.Collect(ctx, alice, exchange.ReportOptions{OwnerIDs: true})
	if err != nil || rep.Delivered != n {
		t.Fatalf("Collect on A = %+v, %v; want %d delivered", rep, err, n)
	}
	if st := ledgerStates(t, rb, sent); st[exchange.LedgerInbox] != n || len(st) != 1 {
		t.Fatalf("ledger after Collect on A, read on B: %v, want %d inbox rows only", st, n)
	}

	// B's subscription sees, in delivery order, what A collected.
	for i := range n {
		select {
		case m := <-sub.Events():
			if m.ID != order[i] {
				t.Fatalf("event %d = message %v, want %v (delivery order)", i, m.ID, order[i])
			}
		case <-sub.Done():
			t.Fatalf("subscription on B ended: %v", sub.Err())
		case <-time.After(15 * time.Second):
			t.Fatalf("subscription on B got %d of the %d deliveries collected on A", i, n)
		}
	}

	page, err := rb.ReceivePage(ctx, bob, &alice, exchange.Cursor{}, 0)
	if err != nil || len(page.Messages) != n {
		t.Fatalf("Receive on B = %d messages, %v; want %d", len(page.Messages), err, n)
	}

	// Concurrent pops of the one inbox on both replicas: every message handed out exactly once.
	var (
		mu     sync.Mutex
		popped = map[uuid.UUID]int{}
		wg     sync.WaitGroup
		errs   = make(chan error, 8)
	)
	for _, r := range []*exchangedb.Engine{ra, rb, ra, rb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, ok, err := r.PopIf(ctx, bob, alice, nil)
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				popped[m.ID]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("PopIf: %v", err)
	}
	if len(popped) != n {
		t.Errorf("the pops on both replicas handed out %d distinct messages, want %d", len(popped), n)
	}
	for id, c := range popped {
		if c != 1 {
			t.Errorf("message %s handed out %d times", id, c)
		}
	}
	if st := ledgerStates(t, ra, sent); st[exchange.LedgerPopped] != n || len(st) != 1 {
		t.Fatalf("ledger after the pops: %v, want %d popped rows only", st, n)
	}

	// Unregister on A ends B's subscription: the owner left the one post office.
	if _, ok, err := ra.UnregisterIf(ctx, bob, nil); err != nil || !ok {
		t.Fatalf("Unregister on A = %v, %v", ok, err)
	}
	select {
	case <-sub.Done():
		if !errors.Is(sub.Err(), exchange.ErrOwnerNotRegistered) {
			t.Errorf("subscription on B ended with %v, want ErrOwnerNotRegistered", sub.Err())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("subscription on B still live after its owner unregistered on A")
	}
}

// Locks (docs/decisions/0019): Collect A delivering to B while Collect B delivers to A, on two
// replicas, must never deadlock: both lock the owner rows they share in id order before anything
// else. PostgreSQL would break a deadlock and the store retry it, so the spy counts what the
// database reported rather than trusting the calls' success.
func TestCrossCollectsDoNotDeadlock(t *testing.T) {
	ra, rb, spies := twoReplicas(t)
	ctx := tctx(t)
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	register(t, ra, a, b, c)
	sent := map[uuid.UUID]bool{}
	const rounds, per = 15, 4
	for round := range rounds {
		for i := range per {
			sent[send(t, ra, a, envelope.IDParticipant(b), fmt.Sprint("a", round, i)).ID] = true
			sent[send(t, rb, b, envelope.IDParticipant(a), fmt.Sprint("b", round, i)).ID] = true
			sent[send(t, ra, c, envelope.None(), fmt.Sprint("c", round, i)).ID] = true // broadcasts lock a and b too
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for _, job := range []struct {
			r     *exchangedb.Engine
			owner uuid.UUID
		}{{ra, a}, {rb, b}, {rb, c}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := job.r.Collect(ctx, job.owner, exchange.ReportOptions{}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: Collect: %v", round, err)
		}
	}
	if n := spies[0].count() + spies[1].count(); n != 0 {
		t.Errorf("PostgreSQL reported %d deadlocks between crossing collects, want 0", n)
	}
	// Every delivery is in an inbox: a's and b's direct messages once each, c's broadcasts at a and b.
	st := ledgerStates(t, ra, sent)
	if want := rounds * per * 4; st[exchange.LedgerInbox] != want || len(st) != 1 {
		t.Errorf("ledger: %v, want %d inbox rows only", st, want)
	}
}
