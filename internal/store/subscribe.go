package store

import (
	"context"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// DefaultSubscriberBuffer is how many commits a subscription buffers by
// default. The writer never waits for a subscriber (DESIGN.md); 256 commits
// absorb a burst of writes while the reader is busy sending one frame, and
// a reader further behind than that resumes from its cursor.
const DefaultSubscriberBuffer = 256

// DefaultMaxSubscriptions is how many subscriptions a store holds open at
// once by default. Behind a WatchBranch stream each costs the server about
// 20–30 KiB while idle (its buffer, two goroutines, the HTTP/2 stream;
// measured on the real binary: 26 MiB for the first thousand), so a
// thousand stay well inside the headroom the deployment leaves beside the
// memory budget, and a client that opens streams in a loop meets the limit
// long before it hurts the process. Raise it with the memory to match.
const DefaultMaxSubscriptions = 1_000

// SubscribeInput are the arguments of Subscribe.
type SubscribeInput struct {
	// After is the cursor: the last sequence the caller has; nil means from
	// now (no replay). 0 replays everything still retained.
	After *uint64
	// Incarnation, when not nil, must be the branch's; a cursor of another
	// incarnation is ErrHistoryCompacted whatever its number.
	Incarnation *uuid.UUID
	// Kinds, when not empty, selects the event kinds delivered: a commit
	// carries only its events of those kinds, and a commit with none is not
	// delivered (nor buffered). EventBranchDeleted is always delivered: it
	// ends the subscription.
	Kinds []EventKind
	// Buffer is the number of commits buffered before the subscription is
	// ended as too slow; 0 means the store's default.
	Buffer int
}

// kindSet is a set of event kinds, one bit per kind.
type kindSet uint16

// allKinds is every kind: no filter.
const allKinds kindSet = 1<<(EventBranchDeleted+1) - 1

func newKindSet(kinds []EventKind) kindSet {
	if len(kinds) == 0 {
		return allKinds
	}
	s := kindSet(1 << EventBranchDeleted)
	for _, k := range kinds {
		s |= 1 << k
	}
	return s
}

func (s kindSet) has(k EventKind) bool { return s&(1<<k) != 0 }

// filter returns the events of c that s selects: c itself when it selects
// them all, nil when it selects none.
func (s kindSet) filter(c Commit) Commit {
	if s == allKinds {
		return c
	}
	n := 0
	for _, ev := range c {
		if s.has(ev.Kind) {
			n++
		}
	}
	switch n {
	case len(c):
		return c
	case 0:
		return nil
	}
	out := make(Commit, 0, n)
	for _, ev := range c {
		if s.has(ev.Kind) {
			out = append(out, ev)
		}
	}
	return out
}

// Subscription delivers a branch's commits in sequence order: first the
// retained commits after the cursor (Replay), then live ones (Events),
// with no gap and no duplicate. It is read by one goroutine, either with
// Next or with Replay, Events and Err.
type Subscription struct {
	// BranchID and Incarnation name what is watched.
	BranchID    uuid.UUID
	Incarnation uuid.UUID
	// After is the cursor the subscription starts after: the one given, or
	// Head when none was. Head and Oldest are the branch's head and oldest
	// retained sequences when it subscribed; Replay covers (After, Head].
	After, Head, Oldest uint64

	branch *branch
	kinds  kindSet
	limit  int // buffered commits beyond which the subscriber is too slow
	replay []Commit
	ch     chan Commit // cap limit+1: the last slot is kept for BRANCH_DELETED

	// Written under the branch lock, before ch is closed.
	reason error  // why ch was closed
	pushed uint64 // the last sequence delivered into ch or passed over by the filter
	closed bool   // Close was called
	count  *atomic.Int64

	last uint64 // the last sequence Next delivered (reader side)
}

// Subscribe opens a subscription (Store.Subscribe). Replay and
// registration happen under the branch lock, so no commit falls between
// them. A cursor of another incarnation or older than the retained log is
// ErrHistoryCompacted with the oldest retained sequence; one ahead of the
// head is ErrCursorAhead; past the store's limit of open subscriptions it
// is ErrTooManySubscriptions.
func (m *Memory) Subscribe(_ context.Context, branchID uuid.UUID, in SubscribeInput) (*Subscription, error) {
	b, err := m.writeLocked(branchID)
	if err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	seqErr := func(sentinel error) error {
		return &SequenceError{Err: sentinel, BranchID: b.id, Head: b.head, Oldest: b.log.oldest()}
	}
	if in.Incarnation != nil && *in.Incarnation != b.incarnation {
		return nil, seqErr(ErrHistoryCompacted)
	}
	for _, k := range in.Kinds {
		if k < EventBranchCreated || k > EventBranchDeleted {
			return nil, fieldErr("kinds", envelope.ErrInvalid, "unknown event kind %d", k)
		}
	}
	if in.After != nil {
		switch after := *in.After; {
		case after > b.head:
			return nil, seqErr(ErrCursorAhead)
		case after+1 < b.log.oldest():
			return nil, seqErr(ErrHistoryCompacted)
		}
	}
	if n := m.subsOpen.Add(1); m.opts.maxSubs > 0 && n > int64(m.opts.maxSubs) {
		m.subsOpen.Add(-1)
		return nil, &BranchError{Err: ErrTooManySubscriptions, BranchID: b.id}
	}
	s := &Subscription{
		BranchID: b.id, Incarnation: b.incarnation,
		After: b.head, Head: b.head, Oldest: b.log.oldest(),
		branch: b, kinds: newKindSet(in.Kinds), count: &m.subsOpen, pushed: b.head, last: b.head,
	}
	if in.After != nil {
		for _, c := range b.log.since(*in.After) {
			if c = s.kinds.filter(c); c != nil {
				s.replay = append(s.replay, c)
			}
		}
		s.After, s.last = *in.After, *in.After
	}
	s.limit = in.Buffer
	if s.limit <= 0 {
		s.limit = m.opts.subBuffer
	}
	s.ch = make(chan Commit, s.limit+1)
	b.subs[s] = struct{}{}
	return s, nil
}

// Replay returns the retained commits after the cursor, once: a second
// call returns nil. Read them before Events.
func (s *Subscription) Replay() []Commit {
	r := s.replay
	s.replay = nil
	if len(r) > 0 {
		s.last = r[len(r)-1][len(r[len(r)-1])-1].CommitLast
	}
	return r
}

// Events returns the channel of live commits, which follow the replay with
// no gap. It is closed when the subscription ends, after the commits it
// holds; Err then says why.
func (s *Subscription) Events() <-chan Commit { return s.ch }

// Err returns why the subscription ended: ErrSubscriberTooSlow or
// ErrBranchDeleted as a *SequenceError whose Last is the cursor to resume
// from once Events is drained (every commit up to it was delivered or
// passed over by the kinds filter), or ErrSubscriptionClosed after Close.
// While the subscription is open it returns nil.
func (s *Subscription) Err() error {
	s.branch.mu.RLock()
	reason, pushed := s.reason, s.pushed
	s.branch.mu.RUnlock()
	switch reason {
	case nil:
		return nil
	case ErrSubscriptionClosed:
		return ErrSubscriptionClosed
	}
	return &SequenceError{Err: reason, BranchID: s.BranchID, Last: pushed}
}

// Next returns the next commit: the replay, then live commits. When the
// subscription has ended it returns Err's error; or ctx's error.
func (s *Subscription) Next(ctx context.Context) (Commit, error) {
	if len(s.replay) > 0 {
		c := s.replay[0]
		s.replay = s.replay[1:]
		s.last = c[len(c)-1].CommitLast
		return c, nil
	}
	select {
	case c, ok := <-s.ch:
		if !ok {
			return nil, s.Err()
		}
		s.last = c[len(c)-1].CommitLast
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Last returns the last sequence Next (or Replay) delivered, counting the
// events of that commit the kinds filter passed over: the cursor to resume
// from.
func (s *Subscription) Last() uint64 { return s.last }

// CaughtUp reports whether every commit up to the branch's head has been
// read (or passed over by the kinds filter), and that head: then a
// heartbeat may carry head as a cursor that loses nothing. It is false
// while commits are pending and once the subscription has ended.
func (s *Subscription) CaughtUp() (head uint64, ok bool) {
	b := s.branch
	b.mu.RLock()
	defer b.mu.RUnlock()
	if _, live := b.subs[s]; !live || len(s.replay) > 0 || len(s.ch) > 0 {
		return 0, false
	}
	return b.head, true
}

// Close ends the subscription and frees its place under the store's limit;
// it is safe to call more than once.
func (s *Subscription) Close() {
	b := s.branch
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endSub(s, ErrSubscriptionClosed)
	if !s.closed {
		s.closed = true
		s.count.Add(-1)
	}
}

// endSub unregisters s and closes its channel with reason (branch lock
// held); a subscription already ended is left alone.
func (b *branch) endSub(s *Subscription, reason error) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	s.reason = reason
	close(s.ch)
}

// publish offers a commit to every subscriber without blocking; one whose
// buffer is full is ended as too slow (branch lock held). BRANCH_DELETED
// goes into the slot every buffer keeps for it, so each subscriber still
// open gets it as its last commit, and then ends with ErrBranchDeleted.
func (b *branch) publish(c Commit) {
	last := c[len(c)-1].CommitLast
	final := c[0].Kind == EventBranchDeleted
	for s := range b.subs {
		fc := s.kinds.filter(c)
		switch {
		case fc == nil:
			s.pushed = last // nothing for it: passed over
			continue
		case !final && len(s.ch) >= s.limit:
			b.endSub(s, ErrSubscriberTooSlow)
			continue
		}
		s.ch <- fc // never blocks: len(s.ch) < cap(s.ch), and only the lock holder sends
		s.pushed = last
		if final {
			b.endSub(s, ErrBranchDeleted)
		}
	}
}
