package exchange

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// within runs f in a goroutine and fails the test if it has not returned within testTimeout: a
// call that blocks on a lock it should not need shows up as a failure, not a hung test.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s blocked while another owner was being collected", what)
	}
}

// TestCollectDoesNotBlockOthers: while one owner's collect is in progress (held inside it by a
// hook), sends, receives, pops, collects and subscriptions of other owners complete, and so does a
// send by the collected owner itself; its Unregister waits for the collect and then returns what
// the collect left (issue 6: per-owner locking).
func TestCollectDoesNotBlockOthers(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	mustSend(t, x, ownerA, to(ownerB), "being collected")
	mustSend(t, x, ownerC, to(ownerB), "queued earlier")
	mustCollect(t, x, ownerC)

	unregistered := make(chan *Snapshot, 1)
	x.testHookMidCollect = func(owner uuid.UUID) {
		if owner != ownerA {
			return
		}
		within(t, "Send by another owner", func() { mustSend(t, x, ownerB, to(ownerC), "b->c") })
		within(t, "Send by the owner being collected", func() { mustSend(t, x, ownerA, to(ownerC), "a->c later") })
		within(t, "Receive", func() { x.Receive(ownerB, nil) })
		within(t, "Pop", func() { x.Pop(ownerB, ownerC) })
		within(t, "Collect of another owner", func() { mustCollect(t, x, ownerB) })
		within(t, "Subscribe", func() {
			_, unsub, err := x.Subscribe(ownerC, nil)
			if err != nil {
				t.Error(err)
				return
			}
			unsub()
		})
		go func() { // must wait for the collect of A to finish
			s, _ := x.Unregister(ownerA)
			unregistered <- s
		}()
	}
	rep := mustCollect(t, x, ownerA)
	x.testHookMidCollect = nil
	if rep.Delivered != 1 {
		t.Errorf("collect delivered %d, want 1", rep.Delivered)
	}
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case s := <-unregistered:
		if len(s.Outbox) != 1 {
			t.Errorf("Unregister returned outbox %v, want the send made during the collect", contents(s.Outbox))
		}
	case <-timer.C:
		t.Fatal("Unregister did not return after the collect")
	}
	if got := contents(x.Receive(ownerB, nil)); len(got) != 1 || got[0] != "being collected" {
		t.Errorf("B's inbox %v", got)
	}
	if got := contents(x.Receive(ownerC, &ownerB)); len(got) != 1 {
		t.Errorf("C's inbox from B %v, want the message B collected during A's collect", got)
	}
}
