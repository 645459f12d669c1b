package exchangetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
)

// fx is one case's Service with the test it fails.
type fx struct {
	t   testing.TB
	svc exchange.Service
}

// newFx builds a Service with opts and registers owners, in order.
func newFx(t *testing.T, f Factory, opts Options, owners ...uuid.UUID) *fx {
	t.Helper()
	x := &fx{t: t, svc: f(t, opts)}
	for _, o := range owners {
		x.register(o)
	}
	return x
}

func (x *fx) register(o uuid.UUID) {
	x.t.Helper()
	if _, err := x.svc.Register(ctx(x.t), o); err != nil {
		x.t.Fatalf("Register(%s): %v", o, err)
	}
}

// send sends content from -> rcpt and fails the test on error.
func (x *fx) send(from uuid.UUID, rcpt envelope.Participant, content string) *envelope.Message {
	x.t.Helper()
	m, err := x.svc.Send(ctx(x.t), exchange.SendRequest{Sender: from, Recipient: rcpt, Content: text(content)})
	if err != nil {
		x.t.Fatalf("Send(%s -> %s, %q): %v", from, rcpt, content, err)
	}
	return m
}

// collect collects owner with the owners' ids in the report and fails the test on error.
func (x *fx) collect(owner uuid.UUID) *exchange.Report {
	x.t.Helper()
	rep, err := x.svc.Collect(ctx(x.t), owner, exchange.ReportOptions{OwnerIDs: true})
	if err != nil {
		x.t.Fatalf("Collect(%s): %v", owner, err)
	}
	return rep
}

// get returns owner's snapshot, failing the test if it is not registered.
func (x *fx) get(owner uuid.UUID) *exchange.Snapshot {
	x.t.Helper()
	s, ok, err := x.svc.Get(ctx(x.t), owner)
	if err != nil || !ok {
		x.t.Fatalf("Get(%s) = %v, %v", owner, ok, err)
	}
	return s
}

// receive returns all of owner's inbox messages (sender's only when not nil).
func (x *fx) receive(owner uuid.UUID, sender *uuid.UUID) []*envelope.Message {
	x.t.Helper()
	p, err := x.svc.ReceivePage(ctx(x.t), owner, sender, exchange.Cursor{}, 0)
	if err != nil {
		x.t.Fatalf("ReceivePage(%s): %v", owner, err)
	}
	return p.Messages
}

// pop pops the oldest message of sender's inbox at owner.
func (x *fx) pop(owner, sender uuid.UUID) (*envelope.Message, bool) {
	x.t.Helper()
	m, ok, err := x.svc.PopIf(ctx(x.t), owner, sender, nil)
	if err != nil {
		x.t.Fatalf("PopIf(%s, %s): %v", owner, sender, err)
	}
	return m, ok
}

// unregister removes owner and returns what it held.
func (x *fx) unregister(owner uuid.UUID) (*exchange.Snapshot, bool) {
	x.t.Helper()
	s, ok, err := x.svc.UnregisterIf(ctx(x.t), owner, nil)
	if err != nil {
		x.t.Fatalf("UnregisterIf(%s): %v", owner, err)
	}
	return s, ok
}

// deadLetters pages owner's dead letters.
func (x *fx) deadLetters(owner uuid.UUID, after uint64, limit int) exchange.DeadLetterPage {
	x.t.Helper()
	p, err := x.svc.DeadLetters(ctx(x.t), owner, after, limit)
	if err != nil {
		x.t.Fatalf("DeadLetters(%s): %v", owner, err)
	}
	return p
}

// ownerIDs lists the registered owners in registration order, page by page.
func (x *fx) ownerIDs() []uuid.UUID {
	x.t.Helper()
	var ids []uuid.UUID
	var after uint64
	for {
		page, err := x.svc.Owners(ctx(x.t), after, 100)
		if err != nil {
			x.t.Fatalf("Owners: %v", err)
		}
		for _, o := range page.Owners {
			ids = append(ids, o.ID)
		}
		if !page.More {
			return ids
		}
		after = page.Next
	}
}

// to is a direct recipient.
func to(id uuid.UUID) envelope.Participant { return envelope.IDParticipant(id) }

// text is JSON string content.
func text(s string) jsonv.Value { return jsonv.StringValue(s) }

// contents returns the string contents of msgs.
func contents(msgs []*envelope.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i], _ = m.Content.Dict().Str()
	}
	return out
}

// content returns m's string content.
func content(m *envelope.Message) string { return contents([]*envelope.Message{m})[0] }

// ids returns the ids of msgs.
func ids(msgs []*envelope.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// same reports whether got is the message want, as any engine must give it back: the same id,
// sender, recipient, channel and content (a database engine returns a new value, not the pointer).
func same(got, want *envelope.Message) bool {
	if got == nil || want == nil {
		return got == want
	}
	return got.ID == want.ID && got.Sender.Equal(want.Sender) && got.Recipient.Equal(want.Recipient) &&
		got.Content.Dict().String() == want.Content.Dict().String() &&
		(got.Channel == nil) == (want.Channel == nil) && (got.Channel == nil || *got.Channel == *want.Channel)
}

// sameAll reports whether got and want are the same messages in the same order.
func sameAll(got, want []*envelope.Message) bool {
	return slices.EqualFunc(got, want, same)
}

// next waits for the next event of s, failing the test at testTimeout.
func next(t testing.TB, s *exchange.Subscription) *envelope.Message {
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

// ended waits for s to end, failing the test at testTimeout, and returns its Err.
func ended(t testing.TB, s *exchange.Subscription) error {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case <-s.Done():
		return s.Err()
	case <-timer.C:
		t.Fatal("subscription did not end within the test timeout")
	}
	return nil
}

// Clock is a settable clock for the dead letters' times, the request memory's window and the
// leases' deadlines (exchange.WithClock); engines' own tests use it too. It is safe for concurrent
// use: an engine may read it from its own goroutines.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading at until Add moves it.
func NewClock(at time.Time) *Clock { return &Clock{now: at} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
