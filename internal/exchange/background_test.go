package exchange

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestBackgroundCollection: with background collection on, a sent message reaches the recipient's
// inbox with no Collect call, as LionAGI's Exchange.run pumps sync(); Close stops the loop (goleak
// checks that it ended).
func TestBackgroundCollection(t *testing.T) {
	x := New(WithBackgroundCollection(true))
	defer x.Close()
	for _, o := range []uuid.UUID{ownerA, ownerB, ownerC} {
		if _, err := x.Register(o); err != nil {
			t.Fatal(err)
		}
	}
	s, unsub, err := x.Subscribe(ownerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	sent := []*envelope.Message{
		mustSend(t, x, ownerA, to(ownerB), "direct"),
		mustSend(t, x, ownerC, envelope.None(), "broadcast"),
	}
	got := map[*envelope.Message]bool{}
	for range sent {
		got[next(t, s)] = true
	}
	for _, m := range sent {
		if !got[m] {
			t.Errorf("%v never landed", contents([]*envelope.Message{m}))
		}
	}
	x.Close()
	x.Close() // idempotent
}

// TestBackgroundCollectionOffByDefault: without the option nothing moves until Collect (ADR-0006 D5
// stays observable).
func TestBackgroundCollectionOffByDefault(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB})
	if x.bg != nil {
		t.Fatal("a background collector runs by default")
	}
	mustSend(t, x, ownerA, to(ownerB), "waits")
	if s, _ := x.Get(ownerA); len(s.Outbox) != 1 {
		t.Errorf("outbox %d, want 1 until Collect", len(s.Outbox))
	}
}
