package exchangetest

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// subscribe subscribes and fails the test on error; the subscription ends with the test.
func (x *fx) subscribe(owner uuid.UUID, sender *uuid.UUID) (*exchange.Subscription, func()) {
	x.t.Helper()
	s, unsub, err := x.svc.Subscribe(ctx(x.t), owner, sender)
	if err != nil {
		x.t.Fatalf("Subscribe(%s): %v", owner, err)
	}
	x.t.Cleanup(unsub)
	return s, unsub
}

// testSubscribeLive: a subscription sees direct and broadcast messages as they land in the owner's
// inboxes, in order, and only the chosen sender's when filtered (docs/design.md#exchange).
func testSubscribeLive(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB, ownerC)
	all, _ := x.subscribe(ownerB, nil)
	fromC, _ := x.subscribe(ownerB, &ownerC)
	if all.Err() != nil {
		t.Errorf("Err of a running subscription = %v", all.Err())
	}

	direct := x.send(ownerA, to(ownerB), "direct")
	bcast := x.send(ownerA, envelope.None(), "broadcast")
	x.collect(ownerA)
	fromCMsg := x.send(ownerC, envelope.None(), "from C")
	x.collect(ownerC)
	for _, want := range []*envelope.Message{direct, bcast, fromCMsg} {
		if got := next(t, all); !same(got, want) {
			t.Errorf("event %q, want %q", content(got), content(want))
		}
	}
	if got := next(t, fromC); !same(got, fromCMsg) {
		t.Errorf("filtered subscription got %q, want only C's message", content(got))
	}
	// A last message from C, once seen, proves nothing else of A's was queued before it.
	last := x.send(ownerC, to(ownerB), "last")
	x.collect(ownerC)
	if got := next(t, fromC); !same(got, last) {
		t.Errorf("filtered subscription got %q, want %q", content(got), content(last))
	}
}

// testSubscribeEvictsSlow: a subscriber whose buffer is full is evicted with ErrSubscriberTooSlow,
// the collect does not wait for it, and the messages are in the inbox anyway
// (docs/development.md#style-streams: the publisher never blocks).
func testSubscribeEvictsSlow(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{SubscriberBuffer: 1}, ownerA, ownerB)
	s, unsub := x.subscribe(ownerB, nil)
	for _, c := range []string{"1", "2", "3"} {
		x.send(ownerA, to(ownerB), c)
	}
	x.collect(ownerA) // returns although nobody reads s
	if err := ended(t, s); !errors.Is(err, exchange.ErrSubscriberTooSlow) {
		t.Errorf("Err = %v, want ErrSubscriberTooSlow", err)
	}
	if got := x.receive(ownerB, nil); len(got) != 3 {
		t.Errorf("inbox holds %d messages, want 3", len(got))
	}
	unsub() // ending an evicted subscription again is harmless
}

// testSubscribeEndsOnUnregister: an owner's subscriptions end with ErrOwnerNotRegistered when it
// unregisters; subscribing to an unregistered owner fails.
func testSubscribeEndsOnUnregister(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA)
	s, _ := x.subscribe(ownerA, nil)
	x.unregister(ownerA)
	if err := ended(t, s); !errors.Is(err, exchange.ErrOwnerNotRegistered) {
		t.Errorf("Err = %v, want ErrOwnerNotRegistered", err)
	}
	if _, _, err := x.svc.Subscribe(ctx(t), ownerA, nil); !errors.Is(err, exchange.ErrOwnerNotRegistered) {
		t.Errorf("Subscribe(unregistered) = %v", err)
	}
}

// testUnsubscribe: after unsubscribing, the subscription is done with a nil Err and deliveries no
// longer reach it.
func testUnsubscribe(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{SubscriberBuffer: 1}, ownerA, ownerB)
	s, unsub := x.subscribe(ownerB, nil)
	unsub()
	if err := ended(t, s); err != nil {
		t.Errorf("Err after unsubscribe = %v, want nil", err)
	}
	x.send(ownerA, to(ownerB), "after")
	x.collect(ownerA)
	// A later subscription sees the next delivery; by then the first would have had it too.
	later, _ := x.subscribe(ownerB, nil)
	x.send(ownerA, to(ownerB), "later")
	x.collect(ownerA)
	if got := next(t, later); content(got) != "later" {
		t.Errorf("later subscription got %q", content(got))
	}
	if s.Err() != nil || len(s.Events()) != 0 {
		t.Errorf("after unsubscribe: Err %v, %d events", s.Err(), len(s.Events()))
	}
}

// testSubscribeLimit (issue 11 case 7: SubscribeInbox gets a stream limit like WatchBranch's):
// past the bound Subscribe is ErrTooManySubscriptions; a subscription ended by unsubscribing (once
// or twice) frees its place, as does one whose owner left once its function is called.
func testSubscribeLimit(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{MaxSubscriptions: 2}, ownerA, ownerB)
	_, unsub1 := x.subscribe(ownerA, nil)
	_, unsub2 := x.subscribe(ownerB, nil)
	_, _, err := x.svc.Subscribe(ctx(t), ownerA, nil)
	var tm *exchange.TooManySubscriptionsError
	if !errors.Is(err, exchange.ErrTooManySubscriptions) || !errors.As(err, &tm) || tm.Limit != 2 {
		t.Fatalf("third subscription of 2 = %v, want ErrTooManySubscriptions with limit 2", err)
	}
	if _, _, err := x.svc.Subscribe(ctx(t), ownerC, nil); !errors.Is(err, exchange.ErrOwnerNotRegistered) {
		t.Fatalf("subscription of an unknown owner = %v", err)
	}
	unsub1()
	unsub1()
	_, unsub3 := x.subscribe(ownerA, nil)
	x.unregister(ownerB)
	unsub2()
	_, unsub4 := x.subscribe(ownerA, nil)
	unsub3()
	unsub4()
	if st, err := x.svc.Stats(ctx(t)); err != nil || st.Subscribers != 0 {
		t.Errorf("Stats: %d subscribers after all ended (%v), want 0", st.Subscribers, err)
	}
}

// testClose (review finding MINOR 4): Close ends live subscriptions with ErrClosed, then Send and
// Subscribe fail with ErrClosed, while what the owners hold stays readable and can be drained;
// Close is safe to call twice.
func testClose(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	s, _ := x.subscribe(ownerB, nil)
	sent := x.send(ownerA, to(ownerB), "before Close")
	x.collect(ownerA)
	if got := next(t, s); !same(got, sent) {
		t.Fatalf("event %v, want the message sent before Close", got)
	}
	queued := x.send(ownerA, to(ownerB), "queued before Close")
	if err := x.svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := ended(t, s); !errors.Is(err, exchange.ErrClosed) {
		t.Errorf("subscription ended with %v, want ErrClosed", err)
	}
	if _, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerA, Recipient: to(ownerB)}); !errors.Is(err, exchange.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
	if _, _, err := x.svc.Subscribe(ctx(t), ownerB, nil); !errors.Is(err, exchange.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if got := x.get(ownerA); !sameAll(got.Outbox, []*envelope.Message{queued}) {
		t.Errorf("A's outbox holds %v after a refused Send, want the message queued before Close", contents(got.Outbox))
	}
	if m, ok := x.pop(ownerB, ownerA); !ok || !same(m, sent) {
		t.Errorf("Pop after Close = %v, %v; want the message B held", m, ok)
	}
	if s, ok := x.unregister(ownerA); !ok || !sameAll(s.Outbox, []*envelope.Message{queued}) {
		t.Error("Unregister after Close did not return A's outbox")
	}
	if err := x.svc.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
