package exchange

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestUnregisterIfRemovesNothingWhenRefused (review finding B1): when the caller's check refuses
// what the owner holds (a response that would be too large), nothing is removed and nothing is
// lost: the owner stays registered with the same outbox, inboxes and dead letters, can drain them,
// and a later UnregisterIf that accepts returns what is left.
func TestUnregisterIfRemovesNothingWhenRefused(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB})
	in := mustSend(t, x, ownerB, to(ownerA), "to A")
	mustCollect(t, x, ownerB)
	lost := mustSend(t, x, ownerA, to(ownerD), "to nobody")
	mustCollect(t, x, ownerA)
	queued := mustSend(t, x, ownerA, to(ownerB), "queued")

	errTooBig := errors.New("too big")
	var seen *Snapshot
	s, ok, err := x.UnregisterIf(ownerA, func(s *Snapshot) error { seen = s; return errTooBig })
	if !errors.Is(err, errTooBig) || ok || s != nil {
		t.Fatalf("refused UnregisterIf = %v, %v, %v; want nil, false, the check's error", s, ok, err)
	}
	if seen == nil || !slices.Equal(seen.Outbox, []*envelope.Message{queued}) || len(seen.Inboxes) != 1 ||
		len(seen.DeadLetters) != 1 || seen.DeadLetters[0].Message != lost {
		t.Errorf("check saw %+v, want A's outbox, inbox and dead letter", seen)
	}
	got, ok := x.Get(ownerA)
	if !ok || !slices.Equal(got.Outbox, []*envelope.Message{queued}) || len(got.Inboxes) != 1 ||
		!slices.Equal(got.Inboxes[0].Messages, []*envelope.Message{in}) || len(got.DeadLetters) != 1 {
		t.Fatalf("after the refusal A holds %+v, %v; want everything it held", got, ok)
	}

	// Drain, then leave.
	if m, ok := x.Pop(ownerA, ownerB); !ok || m != in {
		t.Fatalf("Pop = %v, %v", m, ok)
	}
	mustCollect(t, x, ownerA)
	s, ok, err = x.UnregisterIf(ownerA, func(s *Snapshot) error {
		if len(s.Outbox) != 0 {
			return errTooBig
		}
		return nil
	})
	if err != nil || !ok || len(s.Outbox) != 0 || len(s.DeadLetters) != 1 {
		t.Fatalf("accepted UnregisterIf = %+v, %v, %v; want the drained flow", s, ok, err)
	}
	if x.Has(ownerA) {
		t.Error("A still registered")
	}
	if s, ok, err := x.UnregisterIf(ownerA, func(*Snapshot) error { t.Error("check called for an unknown owner"); return nil }); s != nil || ok || err != nil {
		t.Errorf("UnregisterIf(unknown) = %v, %v, %v", s, ok, err)
	}
}
