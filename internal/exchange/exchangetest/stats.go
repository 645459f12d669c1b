package exchangetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// testStats: the snapshot counts owners, queued and inbox messages, dead letters held and ever
// made, and live subscriptions; DeadLettered never decreases, even when the owner holding the dead
// letters leaves (issue 7: metrics for owners, queued and dead-lettered messages). Bytes and
// ByteBudget are the memory engine's byte budget (Capabilities.ByteBudget); a database engine
// bounds its mail otherwise (issue 17 decisions), so they are checked only there.
func testStats(t *testing.T, f Factory, caps Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB, ownerC)
	check := func(step string, want exchange.Stats) {
		t.Helper()
		got, err := x.svc.Stats(ctx(t))
		if err != nil {
			t.Fatalf("%s: Stats: %v", step, err)
		}
		if caps.ByteBudget {
			held := want.Queued+want.Inbox+want.DeadLetters > 0
			if got.ByteBudget != exchange.DefaultByteBudget || got.Bytes < 0 || (held && got.Bytes == 0) {
				t.Errorf("%s: Stats() bytes %d of budget %d, want > 0 while mail is held, of %d", step, got.Bytes, got.ByteBudget, exchange.DefaultByteBudget)
			}
		}
		got.Bytes, got.ByteBudget = 0, 0
		if got != want {
			t.Errorf("%s: Stats() = %+v, want %+v", step, got, want)
		}
	}
	check("registered", exchange.Stats{Owners: 3})

	x.send(ownerA, to(ownerB), "one")
	x.send(ownerA, to(ownerB), "two")
	x.send(ownerA, to(uuid.New()), "lost") // an unknown recipient: a dead letter at collect
	check("sent", exchange.Stats{Owners: 3, Queued: 3})

	_, unsubscribe := x.subscribe(ownerB, nil)
	check("subscribed", exchange.Stats{Owners: 3, Queued: 3, Subscribers: 1})

	x.collect(ownerA)
	check("collected", exchange.Stats{Owners: 3, Inbox: 2, DeadLetters: 1, DeadLettered: 1, Subscribers: 1})

	x.pop(ownerB, ownerA)
	check("popped", exchange.Stats{Owners: 3, Inbox: 1, DeadLetters: 1, DeadLettered: 1, Subscribers: 1})

	if _, ok := x.unregister(ownerA); !ok {
		t.Fatal("Unregister(A) found no owner")
	}
	check("sender left", exchange.Stats{Owners: 2, Inbox: 1, DeadLettered: 1, Subscribers: 1})

	unsubscribe()
	check("unsubscribed", exchange.Stats{Owners: 2, Inbox: 1, DeadLettered: 1})
}
