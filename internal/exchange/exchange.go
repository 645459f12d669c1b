package exchange

import (
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Exchange routes base Messages between registered owners (ADR-0006 D5). It is safe for
// concurrent use; its zero value is not usable: build one with New.
type Exchange struct {
	opts options
	reg  registry // registry.go

	requests requestMemory
	budget   budget        // budget.go
	subs     atomic.Int64  // live subscriptions, against opts.maxSubscriptions (subscribe.go)
	bg       *collector    // nil unless WithBackgroundCollection(true)
	stats    statsCounters // stats.go

	closed    atomic.Bool // set by Close: Send and Subscribe fail with ErrClosed
	closeOnce sync.Once
	// testHookMidCollect, when set, runs while Collect holds the collecting owner's collectMu and
	// is about to deliver; tests use it to show that other owners are not blocked meanwhile.
	testHookMidCollect func(owner uuid.UUID)
}

// New returns an empty Exchange. With WithBackgroundCollection(true) it also starts the
// background collector, which Close stops.
func New(opts ...Option) *Exchange {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	x := &Exchange{opts: o}
	x.budget.limit = o.byteBudget
	x.reg.init()
	x.requests.init()
	if o.background {
		x.bg = startCollector(x)
	}
	return x
}

// Close shuts the Exchange to new messages: it stops the background collector, if any, and waits
// for it; it ends every live subscription with ErrClosed; from then on Send and Subscribe fail
// with ErrClosed. Everything else keeps working, so what the owners hold stays readable and can be
// drained (Collect, Receive, Pop, DeadLetters, Unregister). Close is safe to call more than once.
func (x *Exchange) Close() {
	x.closeOnce.Do(func() {
		x.closed.Store(true)
		if x.bg != nil {
			x.bg.stop()
		}
		// A Subscribe that checked x.closed before the Store holds its flow's lock until its
		// subscription is in f.subs, so this walk ends it.
		for _, f := range x.reg.view().flows(0) {
			f.mu.Lock()
			for s := range f.subs {
				s.end(ErrClosed)
			}
			f.subs = nil
			f.mu.Unlock()
		}
	})
}

// lookup returns the registered flow of owner, or nil.
func (x *Exchange) lookup(owner uuid.UUID) *flow { return x.reg.lookup(owner) }

// isRegistered reports whether owner is registered now.
func (x *Exchange) isRegistered(owner uuid.UUID) bool { return x.lookup(owner) != nil }

// Register creates owner's flow with an empty outbox and returns it; an owner that is registered
// already is ErrOwnerAlreadyRegistered (ADR-0006 D5). settings (at most one is read) are the
// owner's lease settings (issue 18; zero fields: WithLeaseDefaults; see resolveSettings). It
// costs O(1) amortised, whatever the number of owners.
func (x *Exchange) Register(owner uuid.UUID, settings ...OwnerSettings) (*Snapshot, error) {
	s := x.resolveSettings(settings)
	if _, ok := x.reg.add(owner, func(seq uint64) *flow { return newOwnerFlow(owner, seq, s) }); !ok {
		return nil, ownerErr("Owner", owner, ErrOwnerAlreadyRegistered)
	}
	// What a new flow holds: an empty outbox and nothing else. Built here rather than read from the
	// flow, which other goroutines may be writing to already.
	return &Snapshot{Owner: owner, Outbox: []*envelope.Message{}}, nil
}

// Unregister removes owner and returns everything its flow still held — queued outbox, inboxes and
// dead letters (docs/design.md#exchange: nothing is lost by leaving) — or false when owner is not
// registered (ADR-0006 D5: unregistering an unknown owner returns None). It is UnregisterIf with
// no condition.
func (x *Exchange) Unregister(owner uuid.UUID) (*Snapshot, bool) {
	s, ok, _ := x.UnregisterIf(owner, nil)
	return s, ok
}

// UnregisterIf removes owner only if check, given what the owner holds, returns nil; it then
// returns that snapshot and true. An error from check is returned as it is, and nothing is
// removed, so a caller that cannot hand the snapshot on (a response that would be too large) loses
// nothing. An owner that is not registered answers (nil, false, nil) without calling check.
//
// A collect of owner in progress finishes first. check runs under the owner's locks, after which
// the removal is immediate: nothing reaches the flow between the check and the removal. check must
// not call the Exchange. Deliveries to owner that land afterwards become dead letters of their
// senders with reason ReasonRecipientLeft; owner's live subscriptions end with
// ErrOwnerNotRegistered; the inboxes owner filled at other owners are reclaimed once they are empty.
// Removal costs O(1) amortised under the registry's lock, whatever the number of owners.
func (x *Exchange) UnregisterIf(owner uuid.UUID, check func(*Snapshot) error) (*Snapshot, bool, error) {
	for {
		f := x.lookup(owner)
		if f == nil {
			return nil, false, nil
		}
		f.collectMu.Lock()
		f.mu.Lock()
		if f.closed {
			// Unregistered while this call waited for a collect; the owner may be registered anew.
			f.mu.Unlock()
			f.collectMu.Unlock()
			continue
		}
		// Leases ended at max attempts are dead letters in what the owner takes away (lease.go),
		// numbered above NoticedAfter.
		before := f.dead.next
		x.expireLeases(f)
		snap := f.snapshot()
		snap.NoticedAfter = before
		if check != nil {
			if err := check(snap); err != nil {
				f.mu.Unlock()
				f.collectMu.Unlock()
				return nil, false, err
			}
		}
		f.closed = true
		x.reg.remove(f)
		for s := range f.subs {
			s.end(ErrOwnerNotRegistered)
		}
		f.subs = nil
		held := f.bytes
		f.release()
		f.mu.Unlock()
		x.budget.release(held)
		x.reclaimInboxesOf(f)
		f.collectMu.Unlock()
		return snap, true, nil
	}
}

// OwnerInfo describes one registered owner.
type OwnerInfo struct {
	// ID is the owner.
	ID uuid.UUID
	// Seq is the owner's registration number, increasing in registration order; it is the cursor
	// of Owners.
	Seq uint64
	// Queued is the number of messages in its outbox.
	Queued int
	// Inbox is the number of messages in its inboxes.
	Inbox int
}

// OwnersPage is one page of Owners.
type OwnersPage struct {
	// Owners are the owners of the page, in registration order.
	Owners []OwnerInfo
	// Next is where the following page starts (the registration number of the last owner this
	// page visited), when More is set.
	Next uint64
	// More is set when owners follow the page.
	More bool
}

// Owners returns up to limit registered owners with registration number > after, in registration
// order (limit <= 0: all). An owner unregistered while the page is read is left out, and the page
// goes on past it, so a page is short only when it is the last one.
func (x *Exchange) Owners(after uint64, limit int) OwnersPage {
	v := x.reg.view()
	var page OwnersPage
	for _, f := range v.flows(v.after(after)) {
		if limit > 0 && len(page.Owners) == limit {
			page.More = true
			break
		}
		f.mu.Lock()
		if !f.closed {
			queued := f.outbox().len()
			page.Owners = append(page.Owners, OwnerInfo{ID: f.owner, Seq: f.regSeq, Queued: queued, Inbox: f.items - queued})
		}
		f.mu.Unlock()
		page.Next = f.regSeq
	}
	return page
}

// Snapshot is a copy of what one flow holds: LionAGI's Flow with its progressions, plus historyd's
// dead letters.
type Snapshot struct {
	// Owner is the flow's owner.
	Owner uuid.UUID
	// Outbox holds the messages queued for collection, oldest first.
	Outbox []*envelope.Message
	// Inboxes are the owner's inboxes in creation order, each oldest first.
	Inboxes []Inbox
	// DeadLetters are the owner's kept dead letters, oldest first.
	DeadLetters []DeadLetter
	// DeadLettersEvicted counts the dead letters the bound dropped.
	DeadLettersEvicted uint64
	// NoticedAfter, in UnregisterIf's snapshot, is the Seq of the owner's newest dead letter
	// before the call: the dead letters above it are the ones the call itself made, from
	// last-attempt leases it found expired, which the owner could not have read before it left
	// (an Unregister that omits the dead letters it has read still returns those).
	NoticedAfter uint64
}

// Inbox is one sender's inbox in a recipient's flow.
type Inbox struct {
	// Sender is the owner whose messages the inbox holds.
	Sender uuid.UUID
	// Messages are the messages, oldest first.
	Messages []*envelope.Message
}

// snapshot copies what the flow holds, in O(messages held + progressions). The caller holds f.mu.
func (f *flow) snapshot() *Snapshot {
	s := &Snapshot{Owner: f.owner}
	for _, p := range f.progs {
		if p.removed {
			continue
		}
		msgs := make([]*envelope.Message, 0, p.len())
		for _, e := range p.live() {
			msgs = append(msgs, e.msg)
		}
		switch {
		case p.name == outboxName:
			s.Outbox = msgs
		case p.inbox:
			s.Inboxes = append(s.Inboxes, Inbox{Sender: p.sender, Messages: msgs})
		}
	}
	s.DeadLetters, _ = f.dead.after(0, 0)
	s.DeadLettersEvicted = f.dead.evicted
	return s
}

// Get returns a snapshot of owner's flow, or false when owner is not registered (LionAGI's
// Exchange.get).
func (x *Exchange) Get(owner uuid.UUID) (*Snapshot, bool) {
	f := x.lookup(owner)
	if f == nil {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false
	}
	x.expireLeases(f)
	return f.snapshot(), true
}
