package exchange

import (
	"testing"

	"github.com/google/uuid"
)

// TestStats: the snapshot counts owners, queued and inbox messages, dead letters held and ever
// made, and live subscriptions; DeadLettered never decreases, even when the owner holding the dead
// letters leaves (issue 7: metrics for owners, queued and dead-lettered messages, from a snapshot
// method of the domain).
func TestStats(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	check := func(step string, want Stats) {
		t.Helper()
		got := x.Stats()
		if got.ByteBudget != DefaultByteBudget || got.Bytes < 0 {
			t.Errorf("%s: Stats() bytes %d of budget %d, want >= 0 of %d", step, got.Bytes, got.ByteBudget, DefaultByteBudget)
		}
		got.Bytes, got.ByteBudget = 0, 0 // budget_test.go checks them
		if got != want {
			t.Errorf("%s: Stats() = %+v, want %+v", step, got, want)
		}
	}
	check("registered", Stats{Owners: 3})

	mustSend(t, x, ownerA, to(ownerB), "one")
	mustSend(t, x, ownerA, to(ownerB), "two")
	mustSend(t, x, ownerA, to(uuid.New()), "lost") // an unknown recipient: a dead letter at collect
	check("sent", Stats{Owners: 3, Queued: 3})

	_, unsubscribe, err := x.Subscribe(ownerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("subscribed", Stats{Owners: 3, Queued: 3, Subscribers: 1})

	mustCollect(t, x, ownerA)
	check("collected", Stats{Owners: 3, Inbox: 2, DeadLetters: 1, DeadLettered: 1, Subscribers: 1})

	if _, ok := x.Unregister(ownerA); !ok {
		t.Fatal("Unregister(A) found no owner")
	}
	check("sender left", Stats{Owners: 2, Inbox: 2, DeadLettered: 1, Subscribers: 1})

	unsubscribe()
	check("unsubscribed", Stats{Owners: 2, Inbox: 2, DeadLettered: 1})
}
