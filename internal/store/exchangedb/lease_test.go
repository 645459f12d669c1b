package exchangedb_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// newFakeClock is an engine clock the test moves (exchange.WithClock), shared by replicas.
func newFakeClock() *exchangetest.Clock {
	return exchangetest.NewClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
}

// fill registers alice and bob on e and puts n messages from alice in bob's inbox.
func fill(t *testing.T, e exchange.Service, n int, settings exchange.OwnerSettings) (alice, bob uuid.UUID, sent map[uuid.UUID]bool) {
	t.Helper()
	alice, bob = uuid.New(), uuid.New()
	register(t, e, alice)
	if _, err := e.Register(tctx(t), bob, settings); err != nil {
		t.Fatal(err)
	}
	sent = map[uuid.UUID]bool{}
	for i := range n {
		sent[send(t, e, alice, envelope.IDParticipant(bob), fmt.Sprint("m", i)).ID] = true
	}
	if rep, err := e.Collect(tctx(t), alice, exchange.ReportOptions{}); err != nil || rep.Delivered != n {
		t.Fatalf("Collect = %+v, %v; want %d delivered", rep, err, n)
	}
	return alice, bob, sent
}

// lease leases up to max of owner's messages on e and fails the test on error.
func lease(t *testing.T, e exchange.Service, owner uuid.UUID, max int) exchange.LeaseResult {
	t.Helper()
	r, err := e.Lease(tctx(t), exchange.LeaseRequest{Owner: owner, Max: max})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	return r
}

// Issue 18: "competing leasers on different replicas never hold the same message at once". Two
// leasers on each of two replicas race on one inbox with leases that do not expire: every message
// is leased and acknowledged exactly once, PostgreSQL reports no deadlock among them (FOR UPDATE
// SKIP LOCKED: a leaser passes over the rows another is taking), and the ledger says acked for
// each.
func TestReplicasLeaseEachMessageOnce(t *testing.T) {
	ra, rb, spies := twoReplicas(t)
	const n = 120
	_, bob, sent := fill(t, ra, n, exchange.OwnerSettings{Visibility: time.Hour})
	var (
		mu    sync.Mutex
		taken = map[uuid.UUID]int{}
		wg    sync.WaitGroup
		errs  = make(chan error, 4)
	)
	for _, r := range []*exchangedb.Engine{ra, rb, ra, rb} {
		wg.Go(func() {
			for {
				l, err := r.Lease(tctx(t), exchange.LeaseRequest{Owner: bob, Max: 3})
				if err != nil {
					errs <- err
					return
				}
				if len(l.Leases) == 0 {
					return
				}
				for _, le := range l.Leases {
					mu.Lock()
					taken[le.Message.ID]++
					mu.Unlock()
					if le.Receipt.Attempt != 1 {
						errs <- fmt.Errorf("message %s leased with attempt %d, want 1 (no lease expires)", le.Message.ID, le.Receipt.Attempt)
						return
					}
					if err := r.Ack(tctx(t), bob, le.Receipt); err != nil {
						errs <- fmt.Errorf("ack: %w", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(taken) != n {
		t.Errorf("the leasers on both replicas took %d distinct messages, want %d", len(taken), n)
	}
	for id, k := range taken {
		if k != 1 {
			t.Errorf("message %s leased %d times", id, k)
		}
	}
	if d := spies[0].count() + spies[1].count(); d != 0 {
		t.Errorf("PostgreSQL reported %d deadlocks among the leasers, want 0", d)
	}
	if st := ledgerStates(t, rb, sent); st[exchange.LedgerAcked] != n || len(st) != 1 {
		t.Errorf("ledger after every Ack: %v, want %d acked rows only", st, n)
	}
}

// Issue 18: "with the leasing replica gone (postgres), a leased, unacknowledged message is
// delivered again after its deadline, with its attempt count". A leases and goes away (its Engine
// and its connections closed); B sees the message hidden until the deadline A set, then leases it
// with attempt 2; A's receipt is stale from then on, and after max_attempts the message is B's
// dead letter with reason max attempts.
func TestReplicaGoneLeaseComesBack(t *testing.T) {
	url := pgtest.New(t)
	clk := newFakeClock()
	opts := []exchange.Option{exchange.WithClock(clk.Now)}
	sa := openPostgres(t, url)
	ra := exchangedb.New(sa.ExchangeDriver(), opts)
	sb := openPostgres(t, url)
	t.Cleanup(func() { _ = sb.Close() })
	rb := exchangedb.New(sb.ExchangeDriver(), opts)
	t.Cleanup(func() { _ = rb.Close() })

	_, bob, sent := fill(t, ra, 1, exchange.OwnerSettings{MaxAttempts: 2, Visibility: 10 * time.Second})
	first := lease(t, ra, bob, 1)
	if len(first.Leases) != 1 || first.Leases[0].Receipt.Attempt != 1 {
		t.Fatalf("Lease on A = %+v, want the message with attempt 1", first.Leases)
	}
	_ = ra.Close()
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}

	clk.Add(9 * time.Second)
	if l := lease(t, rb, bob, 1); len(l.Leases) != 0 || !l.NextVisible.Equal(first.Leases[0].Deadline) {
		t.Fatalf("Lease on B before A's deadline = %+v (next %v), want none, next %v", l.Leases, l.NextVisible, first.Leases[0].Deadline)
	}
	clk.Add(time.Second)
	again := lease(t, rb, bob, 1)
	if len(again.Leases) != 1 || again.Leases[0].Message.ID != first.Leases[0].Message.ID || again.Leases[0].Receipt.Attempt != 2 {
		t.Fatalf("Lease on B after A's deadline = %+v, want the message with attempt 2", again.Leases)
	}
	if err := rb.Ack(tctx(t), bob, first.Leases[0].Receipt); !errors.Is(err, exchange.ErrLeaseStale) {
		t.Errorf("Ack of A's receipt after B leased the message again = %v, want ErrLeaseStale", err)
	}
	clk.Add(10 * time.Second) // the second (last) attempt expires: the next look dead-letters it
	page, err := rb.DeadLetters(tctx(t), bob, 0, 0)
	if err != nil || len(page.Letters) != 1 || page.Letters[0].Reason != exchange.ReasonMaxAttempts || page.Letters[0].Attempts != 2 {
		t.Fatalf("B's dead letters = %+v, %v; want the message, max attempts, 2 attempts", page.Letters, err)
	}
	if st := ledgerStates(t, rb, sent); st[exchange.LedgerDead] != 1 || len(st) != 1 {
		t.Errorf("ledger: %v, want one dead row", st)
	}
}

// Issue 18: "after kill -9 (sqlite) ... a leased, unacknowledged message is delivered again after
// its deadline, with its attempt count" (test/e2e kills the process; here the database is closed
// and opened again), and an owner's settings are its own after a restart with other defaults
// (they are stored resolved at Register).
func TestSQLiteRestartKeepsLeases(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	s := openSQLite(t, dir)
	e := exchangedb.New(s.ExchangeDriver(), []exchange.Option{exchange.WithClock(clk.Now), exchange.WithLeaseDefaults(3, 10*time.Second)})
	_, bob, _ := fill(t, e, 2, exchange.OwnerSettings{})
	first := lease(t, e, bob, 1)
	if len(first.Leases) != 1 || !first.Leases[0].Deadline.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("Lease = %+v, want one lease for the defaults' 10s", first.Leases)
	}
	_ = e.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openSQLite(t, dir)
	defer s.Close()
	e = exchangedb.New(s.ExchangeDriver(), []exchange.Option{exchange.WithClock(clk.Now), exchange.WithLeaseDefaults(9, time.Hour)})
	defer e.Close()
	p, err := e.ReceivePage(tctx(t), bob, nil, exchange.Cursor{}, 0)
	if err != nil || len(p.Leases) != 2 || !p.Leases[0].Held || p.Leases[0].Attempts != 1 || p.Leases[1].Attempts != 0 {
		t.Fatalf("Receive after the restart = %+v, %v; want the first message held (attempt 1), the second never leased", p.Leases, err)
	}
	second := lease(t, e, bob, 2) // the second message only: the first is hidden until its deadline
	if len(second.Leases) != 1 || second.Leases[0].Message.ID == first.Leases[0].Message.ID || !second.Leases[0].Deadline.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("Lease after the restart = %+v, want the other message, for bob's own 10s", second.Leases)
	}
	clk.Add(10 * time.Second)
	again := lease(t, e, bob, 2)
	if len(again.Leases) != 2 || again.Leases[0].Message.ID != first.Leases[0].Message.ID || again.Leases[0].Receipt.Attempt != 2 {
		t.Fatalf("Lease after the deadline = %+v, want the first message with attempt 2, then the second", again.Leases)
	}
	clk.Add(10 * time.Second)
	if l := lease(t, e, bob, 2); len(l.Leases) != 2 || l.Leases[0].Receipt.Attempt != 3 {
		t.Fatalf("third Lease = %+v, want both messages, the first with attempt 3 (bob's max is 3)", l.Leases)
	}
	clk.Add(10 * time.Second)
	snap, ok, err := e.Get(tctx(t), bob)
	if err != nil || !ok || len(snap.DeadLetters) != 2 || snap.DeadLetters[0].Attempts != 3 || snap.DeadLetters[0].Message.ID != first.Leases[0].Message.ID {
		t.Fatalf("Get(bob) = %+v, %v, %v; want both messages dead letters after 3 attempts (bob's max, not the new default 9)", snap, ok, err)
	}
}

// lease.go: "An expired lease is noticed by the next call that looks at the owner's inboxes
// (Lease, PopIf, ReceivePage, Get, DeadLetters, UnregisterIf), before it answers". Each of those
// calls, on each engine, answers as if the expired last-attempt lease had become a dead letter,
// and the ledger (read without sweeping) says it has: a read gives way to the sweep, a Lease runs
// again after it, PopIf and UnregisterIf sweep in their own transaction.
func TestEveryCallThatLooksSweepsFirst(t *testing.T) {
	calls := []struct {
		name string
		// call makes the call on svc for bob (alice the sender) and checks its answer: the
		// message "last" is gone from the inbox, and a dead letter where the call shows them;
		// "next" is still there.
		call func(t *testing.T, svc exchange.Service, alice, bob uuid.UUID, last, next *envelope.Message)
	}{
		{"Lease", func(t *testing.T, svc exchange.Service, _, bob uuid.UUID, _, next *envelope.Message) {
			if l := lease(t, svc, bob, 5); len(l.Leases) != 1 || l.Leases[0].Message.ID != next.ID || l.Leases[0].Receipt.Attempt != 1 {
				t.Errorf("Lease = %+v, want %q alone, attempt 1", l.Leases, "next")
			}
		}},
		{"PopIf", func(t *testing.T, svc exchange.Service, alice, bob uuid.UUID, _, next *envelope.Message) {
			if m, ok, err := svc.PopIf(tctx(t), bob, alice, nil); err != nil || !ok || m.ID != next.ID {
				t.Errorf("Pop = %v, %v, %v; want %q", m, ok, err, "next")
			}
		}},
		{"ReceivePage", func(t *testing.T, svc exchange.Service, _, bob uuid.UUID, _, next *envelope.Message) {
			if p, err := svc.ReceivePage(tctx(t), bob, nil, exchange.Cursor{}, 0); err != nil || len(p.Messages) != 1 || p.Messages[0].ID != next.ID {
				t.Errorf("Receive = %+v, %v; want %q alone", p.Messages, err, "next")
			}
		}},
		{"Get", func(t *testing.T, svc exchange.Service, _, bob uuid.UUID, last, next *envelope.Message) {
			s, ok, err := svc.Get(tctx(t), bob)
			if err != nil || !ok || len(s.Inboxes) != 1 || len(s.Inboxes[0].Messages) != 1 || s.Inboxes[0].Messages[0].ID != next.ID ||
				len(s.DeadLetters) != 1 || s.DeadLetters[0].Message.ID != last.ID {
				t.Errorf("Get = %+v, %v, %v; want %q in the inbox, %q a dead letter", s, ok, err, "next", "last")
			}
		}},
		{"DeadLetters", func(t *testing.T, svc exchange.Service, _, bob uuid.UUID, last, _ *envelope.Message) {
			if p, err := svc.DeadLetters(tctx(t), bob, 0, 0); err != nil || len(p.Letters) != 1 || p.Letters[0].Message.ID != last.ID {
				t.Errorf("DeadLetters = %+v, %v; want %q", p.Letters, err, "last")
			}
		}},
		{"UnregisterIf", func(t *testing.T, svc exchange.Service, _, bob uuid.UUID, last, next *envelope.Message) {
			s, ok, err := svc.UnregisterIf(tctx(t), bob, nil)
			if err != nil || !ok || len(s.Inboxes) != 1 || len(s.Inboxes[0].Messages) != 1 || s.Inboxes[0].Messages[0].ID != next.ID ||
				len(s.DeadLetters) != 1 || s.DeadLetters[0].Message.ID != last.ID || s.DeadLetters[0].Attempts != 1 {
				t.Errorf("Unregister = %+v, %v, %v; want %q returned from the inbox, %q a dead letter", s, ok, err, "next", "last")
			}
		}},
	}
	for _, eng := range []struct {
		name    string
		factory exchangetest.Factory
	}{{"sqlite", sqliteFactory}, {"postgres", postgresFactory}} {
		for _, c := range calls {
			t.Run(eng.name+"/"+c.name, func(t *testing.T) {
				clk := newFakeClock()
				svc := eng.factory(t, exchangetest.Options{Clock: clk.Now})
				alice, bob := uuid.New(), uuid.New()
				register(t, svc, alice)
				if _, err := svc.Register(tctx(t), bob, exchange.OwnerSettings{MaxAttempts: 1, Visibility: time.Second}); err != nil {
					t.Fatal(err)
				}
				last := send(t, svc, alice, envelope.IDParticipant(bob), "last")
				next := send(t, svc, alice, envelope.IDParticipant(bob), "next")
				if _, err := svc.Collect(tctx(t), alice, exchange.ReportOptions{}); err != nil {
					t.Fatal(err)
				}
				if l := lease(t, svc, bob, 1); len(l.Leases) != 1 || l.Leases[0].Message.ID != last.ID {
					t.Fatalf("Lease = %+v, want %q", l.Leases, "last")
				}
				clk.Add(time.Second)
				c.call(t, svc, alice, bob, last, next)
				entries, err := svc.(exchange.Ledgered).Ledger(tctx(t))
				if err != nil {
					t.Fatal(err)
				}
				found := 0
				for _, le := range entries {
					if le.Message != last.ID {
						continue
					}
					found++
					want := exchange.LedgerDead
					if c.name == "UnregisterIf" {
						want = exchange.LedgerReturned // dead-lettered, then returned with bob's dead letters
					}
					if le.State != want || le.Attempts != 1 || le.Recipient != bob.String() {
						t.Errorf("ledger of %q after %s = %+v, want %s, 1 attempt, bob's", "last", c.name, le, want)
					}
				}
				if found != 1 {
					t.Errorf("the ledger holds %d entries of %q, want 1", found, "last")
				}
			})
		}
	}
}

// Review of issue 18, N3 (exchange.OwnerSettings.Resolve, LeaseRequest.Bounds, ClampVisibility,
// ClampDelay): the database engines hold an in-process caller's values to lease.go's bounds as
// the memory engine does (TestLeaseBounds there): settings are stored clamped, a batch is at most
// MaxLeaseBatch, lease lengths and extensions lie within MinVisibility..MaxVisibility, and a
// negative Nack delay is none.
func TestLeaseBoundsHeld(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			clk := newFakeClock()
			svc := eng.factory(t, exchangetest.Options{Clock: clk.Now, MaxInbox: exchangetest.NoBound})
			_, bob, _ := fill(t, svc, exchange.MaxLeaseBatch+1, exchange.OwnerSettings{MaxAttempts: exchange.MaxMaxAttempts + 1, Visibility: 24 * time.Hour})
			attempts, vis, err := svc.(*exchangedb.Engine).StoredSettings(tctx(t), bob)
			if err != nil || attempts != exchange.MaxMaxAttempts || time.Duration(vis) != exchange.MaxVisibility {
				t.Errorf("bob's stored settings = %d, %v, %v; want %d, %v", attempts, time.Duration(vis), err, exchange.MaxMaxAttempts, exchange.MaxVisibility)
			}
			now := clk.Now()
			l := lease(t, svc, bob, exchange.MaxLeaseBatch+50)
			if len(l.Leases) != exchange.MaxLeaseBatch || !l.Leases[0].Deadline.Equal(now.Add(exchange.MaxVisibility)) {
				t.Fatalf("Lease of %d took %d, deadline %v; want %d, now+%v", exchange.MaxLeaseBatch+50, len(l.Leases), l.Leases[0].Deadline, exchange.MaxLeaseBatch, exchange.MaxVisibility)
			}
			if d, err := svc.ExtendLease(tctx(t), bob, l.Leases[0].Receipt, time.Nanosecond); err != nil || !d.Equal(now.Add(exchange.MinVisibility)) {
				t.Errorf("ExtendLease by 1ns = %v, %v; want now+%v", d, err, exchange.MinVisibility)
			}
			if d, err := svc.ExtendLease(tctx(t), bob, l.Leases[0].Receipt, 48*time.Hour); err != nil || !d.Equal(now.Add(exchange.MaxVisibility)) {
				t.Errorf("ExtendLease by 48h = %v, %v; want now+%v", d, err, exchange.MaxVisibility)
			}
			if _, err := svc.Nack(tctx(t), bob, l.Leases[1].Receipt, -time.Hour); err != nil {
				t.Fatal(err)
			}
			if p, err := svc.ReceivePage(tctx(t), bob, nil, exchange.Cursor{}, 2); err != nil || p.Leases[1].Hidden(now) {
				t.Errorf("a Nack with a negative delay left the message hidden: %+v, %v", p.Leases, err)
			}
			if l, err := svc.Lease(tctx(t), exchange.LeaseRequest{Owner: bob, Visibility: time.Nanosecond}); err != nil || len(l.Leases) != 1 || !l.Leases[0].Deadline.Equal(now.Add(exchange.MinVisibility)) {
				t.Errorf("a 1ns lease = %+v, %v; want one with deadline now+%v", l.Leases, err, exchange.MinVisibility)
			}
		})
	}
}

// Review of issue 18, M3 (LeaseResult.More): a Lease that MaxHeld stops before it reads a row
// asks whether a visible one is left (leaseLeft): more when one is, not when every row is held.
// One that takes as many rows as it asked for says more (the doc allows it with none left: a
// database engine does not read further); one that takes fewer says no more.
func TestLeaseMoreAtMaxHeld(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			svc := eng.factory(t, exchangetest.Options{Clock: newFakeClock().Now})
			_, bob, _ := fill(t, svc, 3, exchange.OwnerSettings{Visibility: time.Hour})
			req := exchange.LeaseRequest{Owner: bob, Max: 2, MaxHeld: 2}
			if l, err := svc.Lease(tctx(t), req); err != nil || len(l.Leases) != 2 || !l.More {
				t.Fatalf("Lease of 2 of 3 = %d, more %v, %v; want 2, more", len(l.Leases), l.More, err)
			}
			if l, err := svc.Lease(tctx(t), req); err != nil || len(l.Leases) != 0 || l.Held != 2 || !l.More {
				t.Fatalf("Lease at MaxHeld with one visible = %d (held %d), more %v, %v; want none, 2, more", len(l.Leases), l.Held, l.More, err)
			}
			if l, err := svc.Lease(tctx(t), exchange.LeaseRequest{Owner: bob, Max: 5}); err != nil || len(l.Leases) != 1 || l.More {
				t.Fatalf("Lease of 5 with one visible = %d, more %v, %v; want 1, no more", len(l.Leases), l.More, err)
			}
			req.MaxHeld = 3
			if l, err := svc.Lease(tctx(t), req); err != nil || len(l.Leases) != 0 || l.Held != 3 || l.More {
				t.Fatalf("Lease at MaxHeld with every message held = %d (held %d), more %v, %v; want none, 3, no more", len(l.Leases), l.Held, l.More, err)
			}
		})
	}
}
