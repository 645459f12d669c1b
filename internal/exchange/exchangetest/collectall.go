package exchangetest

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// testCollectAll: collect_all collects every registered owner in registration order, one report
// per owner whose outbox held messages, and returns LionAGI's count (the sum of the owners'
// unique deliveries) (ADR-0006 D5: collect_all; sync is its alias).
func testCollectAll(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerC, ownerA, ownerB)
	x.send(ownerA, to(ownerB), "a->b")
	x.send(ownerA, envelope.None(), "a->all")
	x.send(ownerC, to(ownerD), "c->nobody")
	x.send(ownerC, to(ownerA), "c->a")
	all, err := x.svc.CollectAll(ctx(t), exchange.ReportOptions{OwnerIDs: true})
	if err != nil {
		t.Fatal(err)
	}
	if all.Delivered != 3 || len(all.Reports) != 2 || all.Reports[0].Owner != ownerC || all.Reports[1].Owner != ownerA {
		t.Fatalf("CollectAll = %+v, want C's then A's report, 3 delivered", all)
	}
	if r := all.Reports[0]; r.Delivered != 1 || r.Drops != 1 {
		t.Errorf("C's report: %d delivered, %d drops; want 1 and 1", r.Delivered, r.Drops)
	}
	if r := all.Reports[1]; r.Delivered != 2 || len(r.Deliveries) != 2 || len(r.Deliveries[1].Reached) != 2 {
		t.Errorf("A's report %+v, want 2 delivered, the broadcast reaching C and B", r)
	}
	if got := contents(x.receive(ownerB, nil)); len(got) != 2 || got[0] != "a->b" || got[1] != "a->all" {
		t.Errorf("B received %v", got)
	}
	again, err := x.svc.CollectAll(ctx(t), exchange.ReportOptions{})
	if err != nil || again.Delivered != 0 || len(again.Reports) != 0 {
		t.Errorf("second CollectAll = %+v, %v; want nothing", again, err)
	}
}

// testCollectAllCanceled (review finding M3): CollectAll checks its context before each owner;
// once it is done, the owners not reached keep their outboxes and the error says why.
func testCollectAllCanceled(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB, ownerC)
	x.send(ownerA, to(ownerC), "from A")
	x.send(ownerB, to(ownerC), "from B")
	c, cancel := context.WithCancel(context.Background())
	cancel()
	all, err := x.svc.CollectAll(c, exchange.ReportOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("CollectAll with a canceled context = %v, want context.Canceled", err)
	}
	if all != nil && (all.Delivered != 0 || len(all.Reports) != 0) {
		t.Errorf("CollectAll collected %+v after its context was canceled", all)
	}
	for _, o := range []uuid.UUID{ownerA, ownerB} {
		if s := x.get(o); len(s.Outbox) != 1 {
			t.Errorf("%s's outbox holds %d, want its message still queued", o, len(s.Outbox))
		}
	}
}

// testBackgroundCollection: with background collection on, a sent message reaches the recipient's
// inbox with no Collect call, as LionAGI's Exchange.run pumps sync() (issue 17: the collect pass
// runs once per owner, never twice at once, so nothing lands twice).
func testBackgroundCollection(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{Background: true}, ownerA, ownerB, ownerC)
	s, _ := x.subscribe(ownerB, nil)
	sent := []*envelope.Message{
		x.send(ownerA, to(ownerB), "direct"),
		x.send(ownerC, envelope.None(), "broadcast"),
	}
	got := map[uuid.UUID]int{}
	for range sent {
		got[next(t, s).ID]++
	}
	for _, m := range sent {
		if got[m.ID] != 1 {
			t.Errorf("%q landed %d times, want once", content(m), got[m.ID])
		}
	}
	if in := x.receive(ownerB, nil); len(in) != 2 {
		t.Errorf("B's inboxes hold %v, want the 2 messages once each", contents(in))
	}
	if err := x.svc.Close(); err != nil {
		t.Fatal(err)
	}
}

// testBackgroundOff: without the option nothing moves until Collect (ADR-0006 D5: the explicit
// collect stays observable).
func testBackgroundOff(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	x.send(ownerA, to(ownerB), "waits")
	if s := x.get(ownerA); len(s.Outbox) != 1 {
		t.Errorf("outbox %d, want 1 until Collect", len(s.Outbox))
	}
	if got := x.receive(ownerB, nil); len(got) != 0 {
		t.Errorf("B received %v before any Collect", contents(got))
	}
}
