package exchange

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
)

// TestInboxesOfDepartedSendersAreReclaimed (review finding M2): short-lived senders each deliver
// one message to B and leave; once B has popped everything it holds no inbox, whichever came first
// (the pop, or the sender leaving). An inbox of a sender still registered is kept when empty.
func TestInboxesOfDepartedSendersAreReclaimed(t *testing.T) {
	for _, popFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("popFirst=%v", popFirst), func(t *testing.T) {
			x := newRegistered(t, []uuid.UUID{ownerB, ownerC})
			const n = 500
			senders := make([]uuid.UUID, n)
			for i := range senders {
				senders[i] = uuid.New()
				if _, err := x.Register(senders[i]); err != nil {
					t.Fatal(err)
				}
				mustSend(t, x, senders[i], to(ownerB), "once")
				mustCollect(t, x, senders[i])
			}
			mustSend(t, x, ownerC, to(ownerB), "from C, who stays")
			mustCollect(t, x, ownerC)
			pop := func() {
				for _, s := range append(slices.Clone(senders), ownerC) {
					if _, ok := x.Pop(ownerB, s); !ok {
						t.Fatalf("Pop(B, %s) found nothing", s)
					}
				}
			}
			if popFirst {
				pop()
			}
			for _, s := range senders {
				x.Unregister(s)
			}
			if !popFirst {
				pop()
			}
			if got := x.liveInboxes(ownerB); got != 1 {
				t.Errorf("B keeps %d inboxes, want 1 (C's, empty: C is registered)", got)
			}
			if x.lookup(ownerB).dropped > compactProgressionsAfter {
				t.Errorf("%d reclaimed inboxes left as tombstones", x.lookup(ownerB).dropped)
			}
		})
	}
}

// TestReceiveCostIsPerPage (review finding M2): a Receive filtered by sender looks at that sender's
// inbox only (it used to build a name for every inbox of the owner), and a page that starts deep in
// an inbox finds its start by binary search (it used to walk every message before the cursor).
func TestReceiveCostIsPerPage(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithMaxInbox(0), WithMaxOutbox(0))
	for range 20_000 {
		s := uuid.New()
		if _, err := x.Register(s); err != nil {
			t.Fatal(err)
		}
		mustSend(t, x, s, to(ownerB), "x")
		mustCollect(t, x, s)
	}
	if allocs := testing.AllocsPerRun(100, func() { x.Receive(ownerB, &ownerA) }); allocs > 5 {
		t.Errorf("Receive(B, sender A) with 20,000 inboxes: %.0f allocations, want a few", allocs)
	}
}

// BenchmarkReceiveDeepPage (review finding M2): a page of 10 at the far end of an inbox of 1,000 and
// of 200,000 messages; the cursor is found by binary search, so both cost about the same.
func BenchmarkReceiveDeepPage(b *testing.B) {
	for _, n := range []int{1_000, 200_000} {
		b.Run(fmt.Sprintf("inbox=%d", n), func(b *testing.B) {
			x := New(WithMaxInbox(0), WithMaxOutbox(0))
			for _, o := range []uuid.UUID{ownerA, ownerB} {
				if _, err := x.Register(o); err != nil {
					b.Fatal(err)
				}
			}
			m := mustSend(b, x, ownerB, to(ownerA), "many times")
			f := x.lookup(ownerA)
			f.mu.Lock()
			in := f.inbox(ownerB)
			for in.len() < n {
				f.push(in, entry{msg: m})
			}
			at := Cursor{Inbox: in.ord, Seq: in.live()[n-11].seq}
			f.mu.Unlock()
			b.ReportAllocs()
			for b.Loop() {
				if p := x.ReceivePage(ownerA, &ownerB, at, 10); len(p.Messages) != 10 {
					b.Fatalf("page of %d", len(p.Messages))
				}
			}
		})
	}
}
