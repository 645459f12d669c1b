package exchange

import (
	"sync"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/bufbytes"
	"github.com/historyd/historyd/internal/envelope"
)

// Subscription receives the messages that land in one owner's inboxes from the moment Subscribe
// returns. It has no cursor: inboxes are the durable state, and a subscriber that was evicted or
// reconnects catches up with Receive (docs/design.md#exchange).
type Subscription struct {
	sender *uuid.UUID // only this sender's inbox, when not nil
	events chan *envelope.Message
	done   chan struct{}
	once   sync.Once
	err    error // set once, before done is closed
	// wakeOnly: the subscriber reads events only as wake-ups (a leasing SubscribeInbox, which then
	// leases from the inboxes), so a full buffer drops the event instead of ending the
	// subscription: a wake-up is pending already (WakeOnly).
	wakeOnly bool
	// maxBytes bounds the bytes (messageBytes) buffered in events; held, touched only by the one
	// goroutine that offers, counts them.
	maxBytes int64
	held     bufbytes.Held
}

// SubscribeOption configures a subscription (Subscribe, NewSubscription).
type SubscribeOption func(*Subscription)

// WakeOnly makes a subscription whose events are only wake-ups: when its buffer is full an event
// is dropped, not the subscription, since the subscriber reads the inboxes themselves once woken
// (issue 18's leasing stream: a burst of deliveries must not end it as too slow).
func WakeOnly() SubscribeOption { return func(s *Subscription) { s.wakeOnly = true } }

// Events delivers the messages as they land, in delivery order. The channel is never closed;
// select on Done as well.
func (s *Subscription) Events() <-chan *envelope.Message { return s.events }

// Done is closed when the subscription ends: evicted for falling behind (Err is
// ErrSubscriberTooSlow), its owner unregistered (ErrOwnerNotRegistered), the Exchange closed
// (ErrClosed), or unsubscribed (nil).
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err says why the subscription ended; nil while it runs and after an unsubscribe.
func (s *Subscription) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// end ends the subscription with err, once.
func (s *Subscription) end(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
	})
}

// Subscribe starts a live subscription to owner's inboxes (only sender's inbox when sender is not
// nil), buffered by WithSubscriberBuffer. The returned function ends it and is safe to call more
// than once; the caller must call it. An owner that is not registered is ErrOwnerNotRegistered;
// after Close, ErrClosed; past WithMaxSubscriptions live subscriptions, ErrTooManySubscriptions.
// A subscription counts against the bound until its function is called, however it ended.
func (x *Exchange) Subscribe(owner uuid.UUID, sender *uuid.UUID, opts ...SubscribeOption) (*Subscription, func(), error) {
	f := x.lookup(owner)
	if f == nil {
		return nil, nil, ownerErr("Owner", owner, ErrOwnerNotRegistered)
	}
	if n := x.subs.Add(1); x.opts.maxSubscriptions > 0 && n > int64(x.opts.maxSubscriptions) {
		x.subs.Add(-1)
		return nil, nil, &TooManySubscriptionsError{Open: int(n - 1), Limit: x.opts.maxSubscriptions}
	}
	ok := false
	defer func() {
		if !ok {
			x.subs.Add(-1)
		}
	}()
	s := NewSubscription(sender, x.opts.subscriberBuffer, x.opts.subscriberBufferBytes, opts...)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, nil, ownerErr("Owner", owner, ErrOwnerNotRegistered)
	}
	if x.closed.Load() { // checked under f.mu: Close ends the subscriptions it then finds (exchange.go)
		f.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if f.subs == nil {
		f.subs = map[*Subscription]struct{}{}
	}
	f.subs[s] = struct{}{}
	f.mu.Unlock()

	ok = true
	var once sync.Once
	unsubscribe := func() {
		// The place is freed first, so that once a subscription is seen gone (Stats) a new one fits.
		once.Do(func() { x.subs.Add(-1) })
		f.mu.Lock()
		delete(f.subs, s)
		f.mu.Unlock()
		s.end(nil)
	}
	return s, unsubscribe, nil
}

// publish hands m, just delivered to sender's inbox, to every matching subscription without
// blocking (Offer, as the database engines do): a subscription whose buffer is full is evicted
// with ErrSubscriberTooSlow, unless it is WakeOnly. The caller holds f.mu, so each subscription
// sees the inbox's order; every subscription in f.subs is live (whatever ends one removes it
// under f.mu), so Offer fails only on a full buffer.
func (f *flow) publish(sender uuid.UUID, m *envelope.Message) {
	for s := range f.subs {
		if s.Matches(sender) && !s.Offer(m) {
			delete(f.subs, s)
		}
	}
}

// NewSubscription returns a live subscription with room for buffer pending messages (at least 1)
// of at most bufferBytes bytes together (<= 0: DefaultSubscriberBufferBytes), matching only
// sender's inbox when sender is not nil. Database engines build their subscriptions with it and
// feed them with Offer, and so do the memory engine's Subscribe and publish.
func NewSubscription(sender *uuid.UUID, buffer int, bufferBytes int64, opts ...SubscribeOption) *Subscription {
	if bufferBytes <= 0 {
		bufferBytes = DefaultSubscriberBufferBytes
	}
	s := &Subscription{events: make(chan *envelope.Message, max(buffer, 1)), done: make(chan struct{}), maxBytes: bufferBytes}
	if sender != nil {
		id := *sender
		s.sender = &id
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Matches reports whether a message landing in sender's inbox is for s.
func (s *Subscription) Matches(sender uuid.UUID) bool { return s.sender == nil || *s.sender == sender }

// Offer hands m to s without blocking; when s's buffer is full, in messages or in bytes, it ends
// s with ErrSubscriberTooSlow and reports false (the publisher never waits for a subscriber),
// unless s is WakeOnly: then m is dropped and Offer reports true, a wake-up being pending.
// Offering to an ended subscription is a no-op that reports false. One goroutine at a time offers
// to a subscription, so it sees the inbox's order.
//
// The bytes are messageBytes, the estimate the byte budget charges. A message offered to several
// subscriptions is one message in memory (the memory engine's delivered message, the database
// engines' decoded row): each counts it against its own bound, what its reader controls, so the
// sum over subscriptions bounds the memory they pin from above. A message larger than the bound
// on its own is still taken into an empty buffer: a reader that keeps up gets it live.
func (s *Subscription) Offer(m *envelope.Message) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	s.held.Release(len(s.events))
	n := messageBytes(m)
	if len(s.events) < cap(s.events) && s.held.Fits(n, s.maxBytes) {
		s.events <- m // never blocks: only this goroutine sends, and there is room
		s.held.Add(n)
		return true
	}
	if s.wakeOnly {
		return true
	}
	s.end(ErrSubscriberTooSlow)
	return false
}

// End ends s with err (nil for an unsubscribe), once; later calls do nothing.
func (s *Subscription) End(err error) { s.end(err) }
