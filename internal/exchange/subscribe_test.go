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

// TestSubscribeLive: a subscription sees direct and broadcast messages as they land in the owner's
// inboxes, in order, and only the chosen sender's when filtered (docs/design.md#exchange).
func TestSubscribeLive(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	all, unsubAll, err := x.Subscribe(ownerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsubAll()
	fromC, unsubC, err := x.Subscribe(ownerB, &ownerC)
	if err != nil {
		t.Fatal(err)
	}
	defer unsubC()

	direct := mustSend(t, x, ownerA, to(ownerB), "direct")
	bcast := mustSend(t, x, ownerA, envelope.None(), "broadcast")
	mustCollect(t, x, ownerA)
	fromCMsg := mustSend(t, x, ownerC, envelope.None(), "from C")
	mustCollect(t, x, ownerC)
	for _, want := range []*envelope.Message{direct, bcast, fromCMsg} {
		if got := next(t, all); got != want {
			t.Errorf("event %v, want %v", contents([]*envelope.Message{got}), contents([]*envelope.Message{want}))
		}
	}
	if got := next(t, fromC); got != fromCMsg {
		t.Errorf("filtered subscription got %v, want only C's message", contents([]*envelope.Message{got}))
	}
	select {
	case m := <-fromC.Events():
		t.Errorf("filtered subscription got a second event %v", contents([]*envelope.Message{m}))
	default:
	}
}

// TestSubscribeEvictsSlowSubscriber: a subscriber whose buffer is full is evicted with
// ErrSubscriberTooSlow, the collect does not wait for it, and the message is in the inbox anyway
// (docs/development.md#style-streams: the publisher never blocks).
func TestSubscribeEvictsSlowSubscriber(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithSubscriberBuffer(1))
	s, unsub, err := x.Subscribe(ownerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	for _, c := range []string{"1", "2", "3"} {
		mustSend(t, x, ownerA, to(ownerB), c)
	}
	mustCollect(t, x, ownerA) // returns although nobody reads s
	<-s.Done()
	if !errors.Is(s.Err(), ErrSubscriberTooSlow) {
		t.Errorf("Err = %v, want ErrSubscriberTooSlow", s.Err())
	}
	if got := x.Receive(ownerB, nil); len(got) != 3 {
		t.Errorf("inbox holds %d messages, want 3", len(got))
	}
	unsub() // ending an evicted subscription again is harmless
}

// TestSubscribeEndsOnUnregister: an owner's subscriptions end when it unregisters; subscribing to an
// unregistered owner fails.
func TestSubscribeEndsOnUnregister(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA})
	s, unsub, err := x.Subscribe(ownerA, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	if s.Err() != nil {
		t.Errorf("Err of a running subscription = %v", s.Err())
	}
	x.Unregister(ownerA)
	<-s.Done()
	if !errors.Is(s.Err(), ErrOwnerNotRegistered) {
		t.Errorf("Err = %v, want ErrOwnerNotRegistered", s.Err())
	}
	if _, _, err := x.Subscribe(ownerA, nil); !errors.Is(err, ErrOwnerNotRegistered) {
		t.Errorf("Subscribe(unregistered) = %v", err)
	}
}

// TestUnsubscribe: after unsubscribing, deliveries no longer reach the subscription and Err is nil.
func TestUnsubscribe(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithSubscriberBuffer(1))
	s, unsub, err := x.Subscribe(ownerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	unsub()
	<-s.Done()
	mustSend(t, x, ownerA, to(ownerB), "after")
	mustCollect(t, x, ownerA)
	if s.Err() != nil || len(s.Events()) != 0 {
		t.Errorf("after unsubscribe: Err %v, %d events", s.Err(), len(s.Events()))
	}
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
