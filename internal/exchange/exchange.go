package exchange

import (
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Exchange routes base Messages between registered owners (ADR-0006 D5). It is safe for
// concurrent use; its zero value is not usable: build one with New.
type Exchange struct {
	opts options

	// mu guards the owner index. It is held only to look owners up, register and unregister them,
	// never while a flow's lock is held by the same goroutine.
	mu    sync.RWMutex
	flows map[uuid.UUID]*flow
	// order holds the registered flows in registration order. It is copy-on-write: a published
	// slice is never changed, so readers may keep it after releasing mu (collect_all's and a
	// broadcast's snapshot).
	order   []*flow
	nextReg uint64

	requests requestMemory
	bg       *collector    // nil unless WithBackgroundCollection(true)
	stats    statsCounters // stats.go

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
	x := &Exchange{opts: o, flows: map[uuid.UUID]*flow{}}
	x.requests.init()
	if o.background {
		x.bg = startCollector(x)
	}
	return x
}

// Close stops the background collector, if any, and waits for it. It does not unregister owners:
// their flows stay readable. Close is safe to call more than once.
func (x *Exchange) Close() {
	x.closeOnce.Do(func() {
		if x.bg != nil {
			x.bg.stop()
		}
	})
}

// lookup returns the registered flow of owner, or nil.
func (x *Exchange) lookup(owner uuid.UUID) *flow {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.flows[owner]
}

// isRegistered reports whether owner is registered now.
func (x *Exchange) isRegistered(owner uuid.UUID) bool { return x.lookup(owner) != nil }

// registered returns the flows in registration order. The slice must not be changed.
func (x *Exchange) registered() []*flow {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.order
}

// Register creates owner's flow with an empty outbox and returns it; an owner that is registered
// already is ErrOwnerAlreadyRegistered (ADR-0006 D5).
func (x *Exchange) Register(owner uuid.UUID) (*Snapshot, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.flows[owner]; ok {
		return nil, ownerErr("Owner", owner, ErrOwnerAlreadyRegistered)
	}
	x.nextReg++
	f := newOwnerFlow(owner, x.nextReg)
	x.flows[owner] = f
	x.order = append(slices.Clip(x.order), f) // copy-on-write: a full-capacity append copies
	return f.snapshot(), nil                  // f is not shared yet
}

// Unregister removes owner and returns everything its flow still held — queued outbox, inboxes and
// dead letters (DESIGN.md "Exchange": nothing is lost by leaving) — or false when owner is not
// registered (ADR-0006 D5: unregistering an unknown owner returns None). A collect of owner in
// progress finishes first; deliveries to owner that have not landed yet become dead letters of
// their senders with reason ReasonRecipientLeft; owner's live subscriptions end with
// ErrOwnerNotRegistered.
func (x *Exchange) Unregister(owner uuid.UUID) (*Snapshot, bool) {
	for {
		f := x.lookup(owner)
		if f == nil {
			return nil, false
		}
		f.collectMu.Lock()
		x.mu.Lock()
		if x.flows[owner] != f {
			// Unregistered (and maybe registered again) while this call waited for the collect.
			x.mu.Unlock()
			f.collectMu.Unlock()
			continue
		}
		delete(x.flows, owner)
		order := make([]*flow, 0, len(x.order)-1)
		for _, g := range x.order {
			if g != f {
				order = append(order, g)
			}
		}
		x.order = order
		x.mu.Unlock()

		f.mu.Lock()
		f.closed = true
		snap := f.snapshot()
		subs := f.subs
		f.subs = nil
		for s := range subs {
			s.end(ErrOwnerNotRegistered)
		}
		f.mu.Unlock()
		f.collectMu.Unlock()
		return snap, true
	}
}

// Has reports whether owner is registered.
func (x *Exchange) Has(owner uuid.UUID) bool { return x.isRegistered(owner) }

// Len returns the number of registered owners.
func (x *Exchange) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.flows)
}

// OwnerIDs returns the registered owners in registration order (LionAGI's owner_ids).
func (x *Exchange) OwnerIDs() []uuid.UUID {
	order := x.registered()
	ids := make([]uuid.UUID, len(order))
	for i, f := range order {
		ids[i] = f.owner
	}
	return ids
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

// Owners returns up to limit registered owners with registration number > after, in registration
// order (limit <= 0: all), and whether more follow.
func (x *Exchange) Owners(after uint64, limit int) ([]OwnerInfo, bool) {
	order := x.registered()
	i, _ := slices.BinarySearchFunc(order, after+1, func(f *flow, seq uint64) int { return cmpUint(f.regSeq, seq) })
	rest := order[i:]
	more := false
	if limit > 0 && len(rest) > limit {
		rest, more = rest[:limit], true
	}
	out := make([]OwnerInfo, 0, len(rest))
	for _, f := range rest {
		f.mu.Lock()
		if !f.closed {
			queued := f.byName[outboxName].len()
			out = append(out, OwnerInfo{ID: f.owner, Seq: f.regSeq, Queued: queued, Inbox: f.items - queued})
		}
		f.mu.Unlock()
	}
	return out, more
}

// Snapshot is a copy of what one flow holds: LionAGI's Flow with its progressions and items, plus
// historyd's dead letters.
type Snapshot struct {
	// Owner is the flow's owner.
	Owner uuid.UUID
	// Outbox holds the messages queued for collection, oldest first.
	Outbox []*envelope.Message
	// Inboxes are the owner's inboxes in creation order, each oldest first.
	Inboxes []Inbox
	// Progressions are the flow's progressions in order ("outbox", then "inbox_<sender>"), by id.
	Progressions []ProgressionView
	// Items are the ids of every message held, in insertion order (LionAGI's items pile).
	Items []uuid.UUID
	// DeadLetters are the owner's kept dead letters, oldest first.
	DeadLetters []DeadLetter
	// DeadLettersEvicted counts the dead letters the bound dropped.
	DeadLettersEvicted uint64
}

// Inbox is one sender's inbox in a recipient's flow.
type Inbox struct {
	// Sender is the owner whose messages the inbox holds.
	Sender uuid.UUID
	// Messages are the messages, oldest first.
	Messages []*envelope.Message
}

// snapshot copies the flow. The caller holds f.mu or owns f exclusively.
func (f *flow) snapshot() *Snapshot {
	s := &Snapshot{Owner: f.owner}
	s.Progressions, s.Items = f.views()
	for _, p := range f.progs {
		msgs := make([]*envelope.Message, 0, p.len())
		for _, e := range p.live() {
			msgs = append(msgs, e.msg)
		}
		switch {
		case p.name == outboxName:
			s.Outbox = msgs
		case strings.HasPrefix(p.name, inboxPrefix):
			sender, _ := uuid.Parse(strings.TrimPrefix(p.name, inboxPrefix))
			s.Inboxes = append(s.Inboxes, Inbox{Sender: sender, Messages: msgs})
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
	return f.snapshot(), true
}
