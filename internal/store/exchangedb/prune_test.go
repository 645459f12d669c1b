package exchangedb_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/exchangedb"
)

// common17: "terminal rows (popped, returned, evicted) and the messages no live row refers to are
// pruned after a retention (default 1 h, an exchangedb option)"; live rows never are, and expired
// request ids go with the window the proto promises. Acked rows (issue 18) are terminal as popped
// ones are.
func TestPruneForgetsOnlyTerminalRowsPastTheRetention(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Unix(1_700_000_000, 0)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := openSQLite(t, t.TempDir())
	defer s.Close()
	e := exchangedb.New(s.ExchangeDriver(), []exchange.Option{exchange.WithClock(clock)}, exchangedb.WithRetention(time.Hour))
	defer e.Close()
	ctx := tctx(t)
	alice, bob := uuid.New(), uuid.New()
	register(t, e, alice, bob)
	sent := map[uuid.UUID]bool{}
	popped := send(t, e, alice, envelope.IDParticipant(bob), "popped")
	acked := send(t, e, alice, envelope.IDParticipant(bob), "acked")
	kept := send(t, e, alice, envelope.IDParticipant(bob), "kept")
	sent[popped.ID], sent[acked.ID], sent[kept.ID] = true, true, true
	if _, err := e.Collect(ctx, alice, exchange.ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.PopIf(ctx, bob, alice, nil); err != nil || !ok {
		t.Fatalf("Pop = %v, %v", ok, err)
	}
	l, err := e.Lease(ctx, exchange.LeaseRequest{Owner: bob})
	if err != nil || len(l.Leases) != 1 || l.Leases[0].Message.ID != acked.ID {
		t.Fatalf("Lease = %+v, %v; want %q", l.Leases, err, "acked")
	}
	if err := e.Ack(ctx, bob, l.Leases[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Send(ctx, exchange.SendRequest{Sender: alice, Recipient: envelope.IDParticipant(bob), RequestID: "r"}); err != nil {
		t.Fatal(err)
	}
	advance(59 * time.Minute)
	if err := e.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if st := ledgerStates(t, e, withQueued(sent, e, t)); st[exchange.LedgerPopped] != 1 || st[exchange.LedgerAcked] != 1 {
		t.Fatalf("within the retention the popped and acked rows are kept: %v", st)
	}
	advance(2 * time.Minute)
	if err := e.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	st := ledgerStates(t, e, withQueued(sent, e, t))
	if st[exchange.LedgerPopped] != 0 || st[exchange.LedgerAcked] != 0 || st[exchange.LedgerInbox] != 1 || st[exchange.LedgerOutbox] != 1 {
		t.Fatalf("past the retention: %v, want the popped and acked rows gone and the inbox and outbox rows kept", st)
	}
	if m, ok, err := e.Remembered(ctx, alice, "r", nil); err != nil || ok {
		t.Errorf("request id past its 10 min window = %v, %v, %v; want forgotten", m, ok, err)
	}
	if m, ok, err := e.PopIf(ctx, bob, alice, nil); err != nil || !ok || m.ID != kept.ID {
		t.Errorf("Pop of the kept message after pruning = %v, %v, %v", m, ok, err)
	}
}

// withQueued adds the messages the ledger holds that this test sent without keeping their ids (the
// idempotent Send), so ledgerStates checks only that no unknown row appears from elsewhere.
func withQueued(sent map[uuid.UUID]bool, e *exchangedb.Engine, t *testing.T) map[uuid.UUID]bool {
	entries, err := e.Ledger(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID]bool{}
	for k := range sent {
		out[k] = true
	}
	for _, le := range entries {
		if le.State == exchange.LedgerOutbox {
			out[le.Message] = true
		}
	}
	return out
}

// review17 R6: a pass forgets in chunks, each its own transaction; a pass with more terminal rows
// than a chunk forgets them all, with their messages, and keeps every live row and its message.
func TestPruneInChunksForgetsEveryTerminalRowAndKeepsTheLive(t *testing.T) {
	defer exchangedb.SetPruneChunk(7)()
	var (
		mu  sync.Mutex
		now = time.Unix(1_700_000_000, 0)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := openSQLite(t, t.TempDir())
	defer s.Close()
	e := exchangedb.New(s.ExchangeDriver(), []exchange.Option{exchange.WithClock(clock)}, exchangedb.WithRetention(time.Hour))
	defer e.Close()
	ctx := tctx(t)
	alice, bob := uuid.New(), uuid.New()
	register(t, e, alice, bob)
	sent := map[uuid.UUID]bool{}
	for i := range 40 {
		m := send(t, e, alice, envelope.IDParticipant(bob), fmt.Sprint(i))
		sent[m.ID] = true
	}
	if _, err := e.Collect(ctx, alice, exchange.ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 30 { // 30 terminal rows: four full chunks and a short one
		if _, ok, err := e.PopIf(ctx, bob, alice, nil); err != nil || !ok {
			t.Fatalf("Pop = %v, %v", ok, err)
		}
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if err := e.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	st := ledgerStates(t, e, sent)
	if st[exchange.LedgerPopped] != 0 || st[exchange.LedgerInbox] != 10 {
		t.Fatalf("after a pass of chunks of 7: %v, want no popped row and the 10 inbox rows", st)
	}
	page, err := e.ReceivePage(ctx, bob, nil, exchange.Cursor{}, 0)
	if err != nil || len(page.Messages) != 10 {
		t.Fatalf("the live messages after pruning: %d, %v; want 10 (their bodies kept)", len(page.Messages), err)
	}
	var bodies int64
	if err := s.ExchangeDriver().Read(ctx, func(ctx context.Context, q exchangedb.Querier) error {
		return q.QueryRow(ctx, `SELECT COUNT(*) FROM exchange_messages`).Scan(&bodies)
	}); err != nil || bodies != 10 {
		t.Fatalf("messages kept = %d, %v; want the 10 live ones (the popped ones' bodies forgotten)", bodies, err)
	}
}
