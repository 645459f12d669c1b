package exchangedb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres"
)

// Issue 17 ("mail that survives restarts"): on sqlite, close and reopen the database, and
// everything the Exchange held is there: owners in registration order, the outbox, the inboxes
// with their cursors, dead letters, the eviction count, Send's request ids, and the ledger.
func TestSQLiteRestartKeepsTheExchange(t *testing.T) {
	dir := t.TempDir()
	ctx := tctx(t)
	opts := []exchange.Option{exchange.WithMaxDeadLetters(1)}
	s := openSQLite(t, dir)
	e := exchangedb.New(s.ExchangeDriver(), opts)
	alice, bob, gone := uuid.New(), uuid.New(), uuid.New()
	register(t, e, alice, bob)
	sent := map[uuid.UUID]bool{}
	delivered := send(t, e, alice, envelope.IDParticipant(bob), "delivered")
	sent[delivered.ID] = true
	sent[send(t, e, alice, envelope.IDParticipant(gone), "unknown").ID] = true
	sent[send(t, e, alice, envelope.Unset(), "unset").ID] = true // evicts "unknown" (one dead letter kept)
	if _, err := e.Collect(ctx, alice, exchange.ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	queued := send(t, e, alice, envelope.IDParticipant(bob), "queued")
	sent[queued.ID] = true
	idem, err := e.Send(ctx, exchange.SendRequest{Sender: bob, Recipient: envelope.IDParticipant(alice), RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	sent[idem.ID] = true
	before := snapshots(t, e, alice, bob)
	beforeLedger := ledgerStates(t, e, sent)
	_ = e.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openSQLite(t, dir)
	defer s.Close()
	e = exchangedb.New(s.ExchangeDriver(), opts)
	defer e.Close()
	after := snapshots(t, e, alice, bob)
	for i := range before {
		if !sameSnapshot(before[i], after[i]) {
			t.Errorf("owner %s after the restart:\n got %+v\nwant %+v", before[i].Owner, after[i], before[i])
		}
	}
	page, err := e.Owners(ctx, 0, 0)
	if err != nil || len(page.Owners) != 2 || page.Owners[0].ID != alice || page.Owners[1].ID != bob {
		t.Errorf("Owners after the restart = %+v, %v; want alice then bob", page, err)
	}
	again, err := e.Send(ctx, exchange.SendRequest{Sender: bob, Recipient: envelope.IDParticipant(alice), RequestID: "r1"})
	if err != nil || again.ID != idem.ID {
		t.Errorf("a repeat of request r1 after the restart = %v, %v; want the first message %s", again, err, idem.ID)
	}
	afterLedger := ledgerStates(t, e, sent)
	if len(afterLedger) != len(beforeLedger) {
		t.Errorf("ledger after the restart %v, before %v", afterLedger, beforeLedger)
	}
	for st, n := range beforeLedger {
		if afterLedger[st] != n {
			t.Errorf("ledger after the restart %v, before %v", afterLedger, beforeLedger)
		}
	}
	m, ok, err := e.PopIf(ctx, bob, alice, nil)
	if err != nil || !ok || m.ID != delivered.ID {
		t.Errorf("Pop after the restart = %v, %v, %v; want %s", m, ok, err, delivered.ID)
	}
}

func snapshots(t *testing.T, e exchange.Service, owners ...uuid.UUID) []*exchange.Snapshot {
	t.Helper()
	var out []*exchange.Snapshot
	for _, o := range owners {
		s, ok, err := e.Get(tctx(t), o)
		if err != nil || !ok {
			t.Fatalf("Get(%s) = %v, %v", o, ok, err)
		}
		out = append(out, s)
	}
	return out
}

func ids(ms []*envelope.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func sameIDs(a, b []*envelope.Message) bool {
	x, y := ids(a), ids(b)
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

func sameSnapshot(a, b *exchange.Snapshot) bool {
	if a.Owner != b.Owner || !sameIDs(a.Outbox, b.Outbox) || len(a.Inboxes) != len(b.Inboxes) ||
		len(a.DeadLetters) != len(b.DeadLetters) || a.DeadLettersEvicted != b.DeadLettersEvicted {
		return false
	}
	for i := range a.Inboxes {
		if a.Inboxes[i].Sender != b.Inboxes[i].Sender || !sameIDs(a.Inboxes[i].Messages, b.Inboxes[i].Messages) {
			return false
		}
	}
	for i := range a.DeadLetters {
		x, y := a.DeadLetters[i], b.DeadLetters[i]
		if x.Seq != y.Seq || x.Message.ID != y.Message.ID || x.Reason != y.Reason || !x.Recipient.Equal(y.Recipient) || !x.At.Equal(y.At) {
			return false
		}
	}
	return true
}

// A database fault makes Exchange calls fail with store.ErrStorageUnavailable, which the server
// maps to UNAVAILABLE as it does for history (internal/server/errors.go, the storage rows): here a
// PostgreSQL that cannot be reached.
func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	s, err := postgres.Open(context.Background(), postgres.Config{URL: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := exchangedb.New(s.ExchangeDriver(), nil)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owner := uuid.New()
	_, err = e.Register(ctx, owner)
	if !errors.Is(err, store.ErrStorageUnavailable) {
		t.Errorf("Register with the database unreachable = %v, want store.ErrStorageUnavailable", err)
	}
	_, err = e.Send(ctx, exchange.SendRequest{Sender: owner, Recipient: envelope.None()})
	if !errors.Is(err, store.ErrStorageUnavailable) {
		t.Errorf("Send with the database unreachable = %v, want store.ErrStorageUnavailable", err)
	}
	_, _, err = e.Subscribe(ctx, owner, nil)
	if !errors.Is(err, store.ErrStorageUnavailable) {
		t.Errorf("Subscribe with the database unreachable = %v, want store.ErrStorageUnavailable", err)
	}
}
