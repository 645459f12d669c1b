package store

import (
	"context"

	"github.com/google/uuid"
)

// DefaultSubscriberBuffer is how many commits a subscription buffers by
// default. The writer never waits for a subscriber (DESIGN.md); 256 commits
// absorb a burst of writes while the reader is busy sending one frame, and
// a reader further behind than that resumes from its cursor.
const DefaultSubscriberBuffer = 256

// SubscribeInput are the arguments of Subscribe.
type SubscribeInput struct {
	// After is the cursor: the last sequence the caller has; nil means from
	// now (no replay). 0 replays everything still retained.
	After *uint64
	// Incarnation, when not nil, must be the branch's; a cursor of another
	// incarnation is ErrHistoryCompacted whatever its number.
	Incarnation *uuid.UUID
	// Buffer is the number of commits buffered before the subscription is
	// ended as too slow; 0 means the store's default.
	Buffer int
}

// Subscription delivers a branch's commits in sequence order: first the
// retained commits after the cursor, then live ones, with no gap and no
// duplicate. It is read by one goroutine.
type Subscription struct {
	// BranchID and Incarnation name what is watched.
	BranchID    uuid.UUID
	Incarnation uuid.UUID

	branch *branch
	replay []Commit
	ch     chan Commit
	reason error  // why ch was closed; written before the close
	last   uint64 // the last sequence delivered (reader side)
}

// Subscribe opens a subscription (Store.Subscribe). Replay and
// registration happen under the branch lock, so no commit falls between
// them. A cursor of another incarnation or older than the retained log is
// ErrHistoryCompacted with the oldest retained sequence; one ahead of the
// head is ErrCursorAhead.
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
	s := &Subscription{BranchID: b.id, Incarnation: b.incarnation, branch: b, last: b.head}
	if in.After != nil {
		after := *in.After
		switch {
		case after > b.head:
			return nil, seqErr(ErrCursorAhead)
		case after+1 < b.log.oldest():
			return nil, seqErr(ErrHistoryCompacted)
		}
		s.replay = b.log.since(after)
		s.last = after
	}
	size := in.Buffer
	if size <= 0 {
		size = m.opts.subBuffer
	}
	s.ch = make(chan Commit, size)
	b.subs[s] = struct{}{}
	return s, nil
}

// Next returns the next commit. When the subscription has ended it returns
// the reason: ErrSubscriberTooSlow or ErrBranchDeleted (as a
// *SequenceError with the last delivered sequence), or
// ErrSubscriptionClosed after Close; or ctx's error.
func (s *Subscription) Next(ctx context.Context) (Commit, error) {
	if len(s.replay) > 0 {
		c := s.replay[0]
		s.replay = s.replay[1:]
		s.last = c[len(c)-1].Sequence
		return c, nil
	}
	select {
	case c, ok := <-s.ch:
		if !ok {
			if s.reason == ErrSubscriptionClosed {
				return nil, ErrSubscriptionClosed
			}
			return nil, &SequenceError{Err: s.reason, BranchID: s.BranchID, Last: s.last}
		}
		s.last = c[len(c)-1].Sequence
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Last returns the last sequence Next delivered (the cursor to resume
// from).
func (s *Subscription) Last() uint64 { return s.last }

// Close ends the subscription; it is safe to call more than once.
func (s *Subscription) Close() {
	b := s.branch
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endSub(s, ErrSubscriptionClosed)
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
// buffer is full is ended as too slow (branch lock held).
func (b *branch) publish(c Commit) {
	for s := range b.subs {
		select {
		case s.ch <- c:
		default:
			b.endSub(s, ErrSubscriberTooSlow)
		}
	}
}
