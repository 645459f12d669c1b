package exchange

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestBroadcastSharesOneMessage: every recipient of a broadcast gets the same message (same id;
// messages are immutable values, so one shared copy is LionAGI's deep copy without the copying),
// in registration order, never the sender.
func TestBroadcastSharesOneMessage(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerC, ownerA, ownerB})
	m := mustSend(t, x, ownerA, envelope.None(), "hello all")
	rep := mustCollect(t, x, ownerA)
	if want := []uuid.UUID{ownerC, ownerB}; !slices.Equal(rep.Deliveries[0].Reached, want) {
		t.Errorf("reached %v, want %v", rep.Deliveries[0].Reached, want)
	}
	for _, o := range []uuid.UUID{ownerB, ownerC} {
		if got := x.Receive(o, nil); len(got) != 1 || got[0].ID != m.ID {
			t.Errorf("Receive(%s) = %v, want the broadcast", o, got)
		}
	}
	if got := x.Receive(ownerA, nil); len(got) != 0 {
		t.Errorf("the sender received its own broadcast: %v", contents(got))
	}
}

// TestCollectAllSkipsRemoved: collect_all visits a snapshot in registration order and skips an
// owner removed before its turn (ADR-0006 D5).
func TestCollectAllSkipsRemoved(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	mustSend(t, x, ownerB, to(ownerC), "from B")
	mustSend(t, x, ownerC, to(ownerA), "from C")
	x.testHookMidCollect = func(owner uuid.UUID) {
		if owner == ownerA {
			x.Unregister(ownerB) // A is being collected; B's turn has not come
		}
	}
	all, err := x.CollectAll(context.Background(), ReportOptions{})
	if err != nil || all.Delivered != 1 || len(all.Reports) != 1 || all.Reports[0].Owner != ownerC {
		t.Errorf("CollectAll = %+v, want only C's message delivered", all)
	}
}

// TestCollectAllStopsWhenTheContextEnds (review finding M3): CollectAll checks its context before
// each owner; once it is done, the owners not reached yet keep their outboxes, and the error says
// why.
func TestCollectAllStopsWhenTheContextEnds(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	mustSend(t, x, ownerA, to(ownerC), "from A")
	mustSend(t, x, ownerB, to(ownerC), "from B")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x.testHookMidCollect = func(owner uuid.UUID) {
		if owner == ownerA {
			cancel() // the client gives up while A is being collected
		}
	}
	all, err := x.CollectAll(ctx, ReportOptions{})
	x.testHookMidCollect = nil
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("CollectAll = %v, want context.Canceled", err)
	}
	if all.Delivered != 1 || len(all.Reports) != 1 || all.Reports[0].Owner != ownerA {
		t.Errorf("CollectAll collected %+v, want A only (its collect had started)", all)
	}
	if s, _ := x.Get(ownerB); len(s.Outbox) != 1 {
		t.Errorf("B's outbox holds %d, want its message still queued", len(s.Outbox))
	}
}

// TestDeadLettersAlwaysBounded (review finding MINOR 3): the dead-letter list is bounded per owner
// (docs/design.md#exchange); a bound below 1 is 1, not "no bound".
func TestDeadLettersAlwaysBounded(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA}, WithMaxDeadLetters(0))
	for range 3 {
		mustSend(t, x, ownerA, to(ownerD), "lost")
	}
	mustCollect(t, x, ownerA)
	if page := x.DeadLetters(ownerA, 0, 0); len(page.Letters) != 1 || page.Evicted != 2 {
		t.Errorf("%d dead letters kept, %d evicted; want 1 and 2", len(page.Letters), page.Evicted)
	}
}
