package exchange

import (
	"errors"
	"testing"

	"github.com/google/uuid"
)

// TestCloseShutsTheExchange (review finding MINOR 4): Close ends live subscriptions with ErrClosed,
// then Send and Subscribe fail with ErrClosed — with background collection on, a Send after Close
// would otherwise queue a message nothing collects — while what the owners hold stays readable and
// can be drained.
func TestCloseShutsTheExchange(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithBackgroundCollection(true))
	s, unsub, err := x.Subscribe(ownerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	sent := mustSend(t, x, ownerA, to(ownerB), "before Close")
	if got := next(t, s); got != sent {
		t.Fatalf("event %v, want the message sent before Close", got)
	}
	x.Close()
	<-s.Done()
	if !errors.Is(s.Err(), ErrClosed) {
		t.Errorf("subscription ended with %v, want ErrClosed", s.Err())
	}
	if _, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
	if _, _, err := x.Subscribe(ownerB, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if got, _ := x.Get(ownerA); len(got.Outbox) != 0 {
		t.Errorf("A's outbox holds %d after a refused Send", len(got.Outbox))
	}
	if m, ok := x.Pop(ownerB, ownerA); !ok || m != sent {
		t.Errorf("Pop after Close = %v, %v; want the message B held", m, ok)
	}
	if _, ok := x.Unregister(ownerA); !ok {
		t.Error("Unregister after Close failed")
	}
}
