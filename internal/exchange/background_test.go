package exchange

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

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

// TestSendOfDirtyOwnerSkipsTheCollector (review finding MINOR 7): once an owner is marked as having
// messages queued, its further Sends do not take the collector's lock (they used to take it on
// every Send, while holding the sender's lock).
func TestSendOfDirtyOwnerSkipsTheCollector(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithBackgroundCollection(true))
	x.lookup(ownerA).dirty.Store(true) // as after a first Send the collector has not passed yet
	x.bg.mu.Lock()
	done := make(chan error, 1)
	go func() {
		_, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB)})
		done <- err
	}()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		x.bg.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-timer.C:
		x.bg.mu.Unlock()
		<-done
		t.Fatal("Send of an owner already marked waited for the collector's lock")
	}
}

// TestBackgroundPassCollectsOnlyTheDirtyOwners (review finding MINOR 7): a pass collects the owners
// that sent, in registration order, and no other: with 50,000 owners registered it visits exactly
// the 3 that sent. (Its cost is the number of owners visited; no clock is needed to check it.)
func TestBackgroundPassCollectsOnlyTheDirtyOwners(t *testing.T) {
	for _, n := range []int{100, 50_000} {
		owners := make([]uuid.UUID, n)
		for i := range owners {
			owners[i] = uuid.New()
		}
		x := newRegistered(t, owners, WithBackgroundCollection(true))
		x.bg.stop() // drive the passes from here
		c := x.bg
		var order []uuid.UUID
		x.testHookMidCollect = func(o uuid.UUID) { order = append(order, o) }
		for range 3 {
			order = order[:0]
			for _, i := range []int{n - 1, n / 2, 0} {
				if _, err := x.Send(SendRequest{Sender: owners[i], Recipient: to(owners[(i+1)%n])}); err != nil {
					t.Fatal(err)
				}
			}
			c.pass()
			if want := []uuid.UUID{owners[0], owners[n/2], owners[n-1]}; len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
				t.Fatalf("%d owners: pass visited %v, want exactly %v in registration order", n, order, want)
			}
		}
		x.bg = nil // stopped already
		x.Close()
	}
}
