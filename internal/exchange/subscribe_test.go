package exchange

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// next waits for the next event of s, failing the test at testTimeout.
func next(t *testing.T, s *Subscription) *envelope.Message {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case m := <-s.Events():
		return m
	case <-s.Done():
		t.Fatalf("subscription ended: %v", s.Err())
	case <-timer.C:
		t.Fatal("no event within the test timeout")
	}
	return nil
}

// TestSubscribeLimit (issue 11 case 7: SubscribeInbox gets a stream limit like WatchBranch's):
// past the bound Subscribe is ErrTooManySubscriptions; a subscription ended by unsubscribing (once
// or twice) frees its place, as does one whose owner left once its function is called.
func TestSubscribeLimit(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithMaxSubscriptions(2))
	_, unsub1, err := x.Subscribe(ownerA, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, unsub2, err := x.Subscribe(ownerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.Subscribe(ownerA, nil); !errors.Is(err, ErrTooManySubscriptions) {
		t.Fatalf("third subscription of 2 = %v, want ErrTooManySubscriptions", err)
	}
	if _, _, err := x.Subscribe(ownerC, nil); !errors.Is(err, ErrOwnerNotRegistered) {
		t.Fatalf("subscription of an unknown owner = %v", err)
	}
	unsub1()
	unsub1()
	_, unsub3, err := x.Subscribe(ownerA, nil)
	if err != nil {
		t.Fatalf("subscription after one ended: %v", err)
	}
	x.Unregister(ownerB)
	unsub2()
	_, unsub4, err := x.Subscribe(ownerA, nil)
	if err != nil {
		t.Fatalf("subscription after the owner of one left: %v", err)
	}
	unsub3()
	unsub4()
	if n := x.subs.Load(); n != 0 {
		t.Errorf("%d subscriptions counted after all ended", n)
	}
}
