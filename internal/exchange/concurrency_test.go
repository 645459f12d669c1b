package exchange

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// within runs f in a goroutine and fails the test if it has not returned within testTimeout, or
// returned an error: a call that blocks on a lock it should not need shows up as a failure, not a
// hung test. f must not call t's Fatal methods, which only the test's goroutine may call; it
// returns its error, and within, on the test's goroutine, fails the test with it.
func within(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-timer.C:
		t.Fatalf("%s blocked while another owner was being collected", what)
	}
}

// sendErr sends and returns the error only.
func sendErr(x *Exchange, from uuid.UUID, rcpt envelope.Participant, content string) error {
	_, err := x.Send(SendRequest{Sender: from, Recipient: rcpt, Content: text(content)})
	return err
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
		within(t, "Send by another owner", func() error { return sendErr(x, ownerB, to(ownerC), "b->c") })
		within(t, "Send by the owner being collected", func() error { return sendErr(x, ownerA, to(ownerC), "a->c later") })
		within(t, "Receive", func() error { x.Receive(ownerB, nil); return nil })
		within(t, "Pop", func() error { x.Pop(ownerB, ownerC); return nil })
		within(t, "Collect of another owner", func() error { _, err := x.Collect(ownerB); return err })
		within(t, "Subscribe", func() error {
			_, unsub, err := x.Subscribe(ownerC, nil)
			if err != nil {
				return err
			}
			unsub()
			return nil
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
