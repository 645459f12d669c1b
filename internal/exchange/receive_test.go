package exchange

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestReceiveOrderAndPages: receive is non-destructive, inbox creation order then FIFO, optionally
// one sender's inbox (ADR-0006 D5); pages continue from the cursor, and a page boundary skips
// nothing even when messages are popped in between.
func TestReceiveOrderAndPages(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	mustSend(t, x, ownerB, to(ownerC), "b1") // B's inbox on C is created first
	mustSend(t, x, ownerB, to(ownerC), "b2")
	mustCollect(t, x, ownerB)
	mustSend(t, x, ownerA, to(ownerC), "a1")
	mustSend(t, x, ownerA, to(ownerC), "a2")
	mustCollect(t, x, ownerA)
	mustSend(t, x, ownerB, to(ownerC), "b3")
	mustCollect(t, x, ownerB)

	if got, want := contents(x.Receive(ownerC, nil)), []string{"b1", "b2", "b3", "a1", "a2"}; !slices.Equal(got, want) {
		t.Errorf("Receive = %v, want %v", got, want)
	}
	if got, want := contents(x.Receive(ownerC, &ownerA)), []string{"a1", "a2"}; !slices.Equal(got, want) {
		t.Errorf("Receive(sender A) = %v, want %v", got, want)
	}
	if got := x.Receive(ownerC, &ownerD); len(got) != 0 {
		t.Errorf("Receive(sender with no inbox) = %v", contents(got))
	}
	if got := x.Receive(ownerD, nil); got != nil {
		t.Errorf("Receive(unknown owner) = %v, want empty", contents(got))
	}

	var got []string
	var cur Cursor
	for pages := 0; pages < 10; pages++ {
		p := x.ReceivePage(ownerC, nil, cur, 2)
		got = append(got, contents(p.Messages)...)
		if pages == 0 {
			x.Pop(ownerC, ownerB) // b1, already returned
		}
		if !p.More {
			break
		}
		cur = p.Next
	}
	if want := []string{"b1", "b2", "b3", "a1", "a2"}; !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}
}

// TestPop: pop_message removes the oldest message of one sender's inbox and answers false for an
// empty or missing inbox and an unknown owner (ADR-0006 D5; vector "direct send/collect/receive/pop").
func TestPop(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB})
	mustSend(t, x, ownerA, to(ownerB), "m1")
	mustSend(t, x, ownerA, to(ownerB), "m2")
	mustCollect(t, x, ownerA)
	for _, want := range []string{"m1", "m2"} {
		m, ok := x.Pop(ownerB, ownerA)
		if !ok || contents([]*envelope.Message{m})[0] != want {
			t.Fatalf("Pop = %v, %v; want %s", m, ok, want)
		}
	}
	for name, args := range map[string][2]uuid.UUID{
		"empty inbox": {ownerB, ownerA}, "missing inbox": {ownerB, ownerC}, "unknown owner": {ownerC, ownerA},
	} {
		if m, ok := x.Pop(args[0], args[1]); ok || m != nil {
			t.Errorf("%s: Pop = %v, %v; want nothing", name, m, ok)
		}
	}
	if s, _ := x.Get(ownerB); len(s.Inboxes) != 1 || len(s.Inboxes[0].Messages) != 0 {
		t.Errorf("after popping everything: %+v, want the empty inbox of A (registered) kept", s)
	}
}
