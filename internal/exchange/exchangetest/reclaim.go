package exchangetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// testReclaimInboxes: empty inboxes of departed senders are reclaimed, by the Pop that empties the
// inbox of a sender no longer registered or by the Unregister of a sender whose inboxes are empty
// (docs/decisions/0002, "Empty inboxes of departed senders are reclaimed"); an empty inbox of a
// sender still registered is kept. Whichever comes first, the pop or the leaving, the owner ends
// with no inbox of the departed senders.
func testReclaimInboxes(t *testing.T, f Factory, _ Capabilities) {
	for _, popFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("popFirst=%v", popFirst), func(t *testing.T) {
			x := newFx(t, f, Options{}, ownerB, ownerC)
			senders := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
			for _, s := range senders {
				x.register(s)
				x.send(s, to(ownerB), "once")
				x.collect(s)
			}
			x.send(ownerC, to(ownerB), "from C, who stays")
			x.collect(ownerC)
			pop := func() {
				t.Helper()
				for _, s := range append(slices.Clone(senders), ownerC) {
					if _, ok := x.pop(ownerB, s); !ok {
						t.Fatalf("Pop(B, %s) found nothing", s)
					}
				}
			}
			if popFirst {
				pop()
			}
			for _, s := range senders {
				x.unregister(s)
			}
			if !popFirst {
				if got := len(x.get(ownerB).Inboxes); got != 4 {
					t.Errorf("B holds %d inboxes before popping, want 4 (departed senders' mail stays)", got)
				}
				pop()
			}
			if in := x.get(ownerB).Inboxes; len(in) != 1 || in[0].Sender != ownerC || len(in[0].Messages) != 0 {
				t.Errorf("B keeps inboxes %+v, want only C's, empty (C is registered)", in)
			}
		})
	}
}

// testReturningSenderInbox: a sender whose empty inbox was reclaimed gets a new one, after every
// existing inbox, when it registers again and delivers (docs/decisions/0002: "at the end of the
// order, not back in its old place").
func testReturningSenderInbox(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB, ownerC)
	x.send(ownerA, to(ownerC), "a1")
	x.collect(ownerA)
	x.send(ownerB, to(ownerC), "b1")
	x.collect(ownerB)
	x.pop(ownerC, ownerA)
	x.unregister(ownerA) // A's inbox at C is empty: reclaimed
	x.register(ownerA)
	x.send(ownerA, to(ownerC), "a2")
	x.collect(ownerA)
	if got, want := contents(x.receive(ownerC, nil)), []string{"b1", "a2"}; !slices.Equal(got, want) {
		t.Errorf("Receive(C) = %v, want %v (A's new inbox after B's)", got, want)
	}
	if in := x.get(ownerC).Inboxes; len(in) != 2 || in[0].Sender != ownerB || in[1].Sender != ownerA {
		t.Errorf("C's inboxes %+v, want B's then A's", in)
	}
}

// testReceiveCursorSurvivesReclaim: cursors carry an inbox's creation ordinal, never reused, so an
// inbox before the cursor reclaimed between two pages makes the walk neither skip nor repeat a
// message (docs/decisions/0002).
func testReceiveCursorSurvivesReclaim(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB, ownerC, ownerD)
	for _, s := range []uuid.UUID{ownerA, ownerB, ownerC} {
		for i := range 2 {
			x.send(s, to(ownerD), fmt.Sprintf("%s%d", s.String()[:1], i))
		}
		x.collect(s)
	}
	first, err := x.svc.ReceivePage(ctx(t), ownerD, nil, exchange.Cursor{}, 3) // a0 a1 b0
	if err != nil || !first.More {
		t.Fatalf("first page = %v, more %v, %v", contents(first.Messages), first.More, err)
	}
	x.pop(ownerD, ownerA)
	x.pop(ownerD, ownerA)
	x.unregister(ownerA) // A's inbox, before the cursor, is reclaimed
	if n := len(x.get(ownerD).Inboxes); n != 2 {
		t.Fatalf("D has %d inboxes, want A's reclaimed", n)
	}
	rest, err := x.svc.ReceivePage(ctx(t), ownerD, nil, first.Next, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := append(contents(first.Messages), contents(rest.Messages)...)
	if want := []string{"a0", "a1", "b0", "b1", "c0", "c1"}; !slices.Equal(got, want) || rest.More {
		t.Errorf("pages = %v (more %v), want %v", got, rest.More, want)
	}
}
