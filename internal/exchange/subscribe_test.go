package exchange

import (
	"errors"
	"fmt"
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

// TestWakeOnlySurvivesBurst (review of issue 18, M2: a leasing stream reads its subscription's
// events only as wake-ups, so a burst of deliveries must not end it as too slow): one Collect of
// 50 messages into a buffer of 4 ends a plain subscription with ErrSubscriberTooSlow and leaves a
// WakeOnly one live with a full buffer; once drained, the next delivery wakes it again.
func TestWakeOnlySurvivesBurst(t *testing.T) {
	const buffer, burst = 4, 50
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithSubscriberBuffer(buffer))
	plain, unsubPlain, err := x.Subscribe(ownerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsubPlain()
	wake, unsubWake, err := x.Subscribe(ownerB, nil, WakeOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer unsubWake()
	for i := range burst {
		mustSend(t, x, ownerA, to(ownerB), fmt.Sprint("burst ", i))
	}
	mustCollect(t, x, ownerA)
	select {
	case <-plain.Done():
		if !errors.Is(plain.Err(), ErrSubscriberTooSlow) {
			t.Fatalf("the plain subscription ended with %v, want ErrSubscriberTooSlow", plain.Err())
		}
	default:
		t.Fatalf("a burst of %d into a buffer of %d left the plain subscription live: the test shows nothing", burst, buffer)
	}
	select {
	case <-wake.Done():
		t.Fatalf("the WakeOnly subscription ended with %v after the burst", wake.Err())
	default:
	}
	for range buffer {
		next(t, wake)
	}
	select {
	case m := <-wake.Events():
		t.Fatalf("event %v past the buffer: the burst's overflow should have been dropped", contents([]*envelope.Message{m}))
	default:
	}
	later := mustSend(t, x, ownerA, to(ownerB), "later")
	mustCollect(t, x, ownerA)
	if m := next(t, wake); m.ID != later.ID {
		t.Errorf("wake-up after the burst = %v, want the later message", contents([]*envelope.Message{m}))
	}
}
