package exchange

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestRequestMemoryOnlyForRegisteredSenders (review finding MINOR 1): idempotent sends from owners
// that were never registered fail without leaving request memory behind.
func TestRequestMemoryOnlyForRegisteredSenders(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA})
	for range 5_000 {
		_, err := x.Send(SendRequest{Sender: uuid.New(), Recipient: to(ownerA), RequestID: uuid.NewString()})
		if !errors.Is(err, ErrOwnerNotRegistered) {
			t.Fatalf("Send from an unregistered owner = %v", err)
		}
	}
	if _, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), RequestID: "r"}); err != nil {
		t.Fatal(err)
	}
	x.requests.mu.Lock()
	n := len(x.requests.bySender)
	x.requests.mu.Unlock()
	if n != 1 {
		t.Errorf("request memory holds %d senders' logs, want 1 (A's)", n)
	}
}

// TestRequestMemoryExpiresIdleSenders (review finding MINOR 1): the log of a sender idle for longer
// than the TTL is dropped by the next idempotent send of anyone, at O(1) cost (it is at the front
// of the idle list), not by a sweep every 1,024 sends; a sender in use keeps its log.
func TestRequestMemoryExpiresIdleSenders(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC}, WithClock(func() time.Time { return now }), WithRequestMemory(time.Minute, 10))
	send := func(from uuid.UUID, id string) {
		t.Helper()
		if _, err := x.Send(SendRequest{Sender: from, Recipient: to(ownerD), RequestID: id}); err != nil {
			t.Fatal(err)
		}
	}
	send(ownerA, "a")
	now = now.Add(30 * time.Second)
	send(ownerB, "b")
	now = now.Add(31 * time.Second) // A idle 61 s, B 31 s
	send(ownerC, "c")
	if x.requests.lookup(ownerA) != nil {
		t.Error("A's log kept after A was idle past the TTL")
	}
	if x.requests.lookup(ownerB) == nil || x.requests.lookup(ownerC) == nil {
		t.Error("the log of a sender idle less than the TTL was dropped")
	}
	if x.requests.idle.Len() != 2 {
		t.Errorf("idle list holds %d logs, want 2", x.requests.idle.Len())
	}
}
