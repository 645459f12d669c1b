package exchangedb_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
	"github.com/historyd/historyd/internal/store/exchangedb"
)

// event waits for the next event of s, failing the test when it ends or at the deadline.
func event(t *testing.T, s *exchange.Subscription) *envelope.Message {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case m := <-s.Events():
		return m
	case <-s.Done():
		t.Fatalf("subscription ended: %v", s.Err())
	case <-timer.C:
		t.Fatal("no event within 20s")
	}
	return nil
}

// Review of issue 18, M2 (exchange.WakeOnly: "a full buffer drops the event, the subscription
// stays"): the dispatcher ends a WakeOnly subscription in no other way when it falls behind. One
// Collect of 50 into buffers of 4 ends a plain subscription with ErrSubscriberTooSlow and leaves
// the WakeOnly one live, its buffer full; once drained, the next delivery wakes it again.
//
// Without sleeping: the dispatcher is one goroutine; a marker from carol, collected once the plain
// subscription has ended, is dispatched after the burst; once it has reached a subscription to
// carol's mail alone and the dispatcher is idle (exchangedb.DispatchIdle), every subscription has
// been offered the burst and the marker. (The marker's arrival alone was not enough: a row is
// offered to each subscription in turn, and the test could drain the WakeOnly one between two of
// those offers, making room for the marker: seen under load in CI.)
func TestWakeOnlySurvivesBurst(t *testing.T) {
	const buffer, burst = 4, 50
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			svc := eng.factory(t, exchangetest.Options{SubscriberBuffer: buffer, MaxInbox: exchangetest.NoBound, MaxOutbox: exchangetest.NoBound})
			ctx := tctx(t)
			alice, bob, carol := uuid.New(), uuid.New(), uuid.New()
			register(t, svc, alice, bob, carol)
			plain, unsubPlain, err := svc.Subscribe(ctx, bob, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer unsubPlain()
			wake, unsubWake, err := svc.Subscribe(ctx, bob, nil, exchange.WakeOnly())
			if err != nil {
				t.Fatal(err)
			}
			defer unsubWake()
			fromCarol, unsubCarol, err := svc.Subscribe(ctx, bob, &carol)
			if err != nil {
				t.Fatal(err)
			}
			defer unsubCarol()

			for i := range burst {
				send(t, svc, alice, envelope.IDParticipant(bob), fmt.Sprint("burst ", i))
			}
			if _, err := svc.Collect(ctx, alice, exchange.ReportOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-plain.Done():
				if !errors.Is(plain.Err(), exchange.ErrSubscriberTooSlow) {
					t.Fatalf("the plain subscription ended with %v, want ErrSubscriberTooSlow", plain.Err())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("a burst of %d into a buffer of %d left the plain subscription live: the test shows nothing", burst, buffer)
			}
			marker := send(t, svc, carol, envelope.IDParticipant(bob), "marker")
			if _, err := svc.Collect(ctx, carol, exchange.ReportOptions{}); err != nil {
				t.Fatal(err)
			}
			if m := event(t, fromCarol); m.ID != marker.ID {
				t.Fatalf("carol's subscription got %s, want the marker", m.ID)
			}
			e, ok := svc.(*exchangedb.Engine)
			if !ok {
				t.Fatalf("the factory's service is a %T, not an *exchangedb.Engine", svc)
			}
			waitFor(t, "the dispatcher idle after the marker", func() bool { return exchangedb.DispatchIdle(e) })
			select {
			case <-wake.Done():
				t.Fatalf("the WakeOnly subscription ended with %v after the burst", wake.Err())
			default:
			}
			for range buffer {
				event(t, wake)
			}
			select {
			case m := <-wake.Events():
				t.Fatalf("event %s past the buffer: the burst's overflow and the marker should have been dropped", m.ID)
			default:
			}
			later := send(t, svc, alice, envelope.IDParticipant(bob), "later")
			if _, err := svc.Collect(ctx, alice, exchange.ReportOptions{}); err != nil {
				t.Fatal(err)
			}
			if m := event(t, wake); m.ID != later.ID {
				t.Errorf("wake-up after the burst = %s, want the later message", m.ID)
			}
		})
	}
}
