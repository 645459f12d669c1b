package store

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/bufbytes"
	"github.com/historyd/historyd/internal/envelope"
)

// DefaultSubscriberBuffer is how many commits a subscription buffers by
// default. The writer never waits for a subscriber (docs/design.md#sequences); 256 commits
// absorb a burst of writes while the reader is busy sending one frame, and
// a reader further behind than that resumes from its cursor.
const DefaultSubscriberBuffer = 256

// DefaultSubscriberBufferBytes is how many bytes of commits, by the heap
// estimate of commitBytes, a subscription buffers by default before it is
// ended as too slow. The count alone let a watcher that never reads pin
// DefaultSubscriberBuffer commits of up to 4 MiB each, about 1 GiB per
// stream. 2 MiB is the count's 256 commits of messages up to about 8 KB
// (a 1 KB instruction is about 1.8 KB by the estimate), so the count still
// binds first for ordinary traffic and a watcher that keeps up through a
// burst is not evicted by the bytes: a first version at 128 KiB (about 71
// such commits) evicted keeping-up watchers in ordinary bursts (its review).
// DefaultMaxSubscriptions of them hold at most 2 GiB: a small container
// lowers the stream cap or this (README.md, "Memory per stream"). A commit
// larger than the bound is still taken into an empty buffer, so a reader
// that keeps up gets large commits live.
const DefaultSubscriberBufferBytes = 2 << 20

// DefaultMaxSubscriptions is how many subscriptions a store holds open at
// once by default. Behind a WatchBranch stream each costs the server about
// 20–30 KiB while idle (its buffer, two goroutines, the HTTP/2 stream;
// measured on the real binary: 26 MiB for the first thousand), so a
// thousand stay well inside the headroom the deployment leaves beside the
// memory budget, and a client that opens streams in a loop meets the limit
// long before it hurts the process. Raise it with the memory to match.
const DefaultMaxSubscriptions = 1_000

// replayChunk is how many commits a subscription catching up copies from
// the branch's log at a time, under the branch's read lock (a database's
// log with no lock held: FallibleLog): a writer waits for at most one
// chunk's copy from memory (microseconds), never for a database read, and
// a subscription holds at most two chunks whatever the depth of its
// cursor.
const replayChunk = 64

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
	// BufferBytes is the bytes of commits (commitBytes) buffered before the
	// subscription is ended as too slow; 0 means the store's default.
	BufferBytes int64
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
//
// A subscription with a cursor behind the head starts out catching up, as
// etcd's unsynced watchers do: Subscribe only registers it, and its reader
// copies the retained log after its cursor a chunk at a time (replayChunk
// commits, under the branch's read lock; a database's log with no lock
// held, fillUnlocked), so neither the replay's memory nor the writer's
// wait grows with the cursor's depth. publish passes a subscription over
// while it catches up. Once a chunk reaches the head, the reader takes the
// branch's write lock, the one publish holds, copies what was written
// meanwhile (a database's log: only if nothing was, else it reads again)
// and goes live in the same critical section: every later commit is pushed
// to it, every earlier one was copied. If the
// log evicts an event it has not copied yet, it is ended as too slow, as a
// live subscriber whose buffer overflows is; if the branch is deleted, it
// reads the log as the delete left it, through BRANCH_DELETED.
type Subscription struct {
	// BranchID and Incarnation name what is watched.
	BranchID    uuid.UUID
	Incarnation uuid.UUID
	// After is the cursor the subscription starts after: the one given, or
	// Head when none was. Head and Oldest are the branch's head and oldest
	// retained sequences when it subscribed; Replay starts after After and
	// covers at least (After, Head], and whatever is written before it
	// catches up.
	After, Head, Oldest uint64

	feed  *Feed
	kinds kindSet
	limit int         // buffered commits beyond which the subscriber is too slow
	ch    chan Commit // cap limit+1: the last slot is kept for BRANCH_DELETED
	// maxBytes bounds the bytes buffered in ch; held (under the feed's write
	// lock, publish's side only) counts them.
	maxBytes int64
	held     bufbytes.Held

	// Written under the feed's lock (the write lock, except where said).
	reason error // why ch was closed
	// pushed is the last sequence delivered into ch or passed over by the
	// filter; while catching up, the last one copied into replay (the reader
	// moves it under the read lock).
	pushed   uint64
	catching bool // registered but not live yet: publish passes it over
	frozen   Log  // the log as the branch's delete left it, for one ended while catching up
	closed   bool // Close was called
	count    *atomic.Int64

	// Reader side.
	replay    []Commit // copied from the log, not yet returned
	replaying bool     // the log may still have commits to copy for it
	last      uint64   // the last sequence Next delivered
}

// Subscribe opens a subscription (Store.Subscribe). It validates the
// cursor and registers the subscription under the branch lock, in O(1):
// the replay is copied later, by the reader (see Subscription), so no
// commit falls between the cursor and the subscription, and a deep cursor
// costs the writer nothing. A cursor of another incarnation or older than
// the retained log is ErrHistoryCompacted with the oldest retained
// sequence; one ahead of the head is ErrCursorAhead; past the store's
// limit of open subscriptions it is ErrTooManySubscriptions.
func (m *Memory) Subscribe(_ context.Context, branchID uuid.UUID, in SubscribeInput) (*Subscription, error) {
	b, err := m.writeLocked(branchID)
	if err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	return b.feed.Subscribe(b.id, b.incarnation, in, SubscriptionLimits{
		Buffer: m.opts.subBuffer, BufferBytes: m.opts.subBufferBytes, Max: m.opts.maxSubs, Open: &m.subsOpen,
	})
}

// SubscriptionLimits are a store's bounds on subscriptions: the default
// buffer in commits and in bytes (0: DefaultSubscriberBufferBytes), the
// limit of open ones (0: none) and the store's count of them.
type SubscriptionLimits struct {
	Buffer      int
	BufferBytes int64
	Max         int
	Open        *atomic.Int64
}

// Feed is the live side of one branch's subscriptions, which every engine
// keeps in memory (a single process serves a branch's watchers): the lock
// commits are published under (the engine's, for the branch), the open
// subscriptions, and the retained log they catch up from (Log: Memory's
// ring, a database's table). The engine calls Publish after each commit,
// in sequence order, with the lock held for writing.
type Feed struct {
	mu   *sync.RWMutex
	log  Log
	subs map[*Subscription]struct{}
	// onIdle, when set, runs after a Close leaves the feed without
	// subscriptions, with no lock held: an engine that keeps a branch's
	// feed only while it is watched lets it go there.
	onIdle func()
}

// Log is a branch's retained event log as subscriptions read it, under the
// feed's lock (read or write).
type Log interface {
	// Oldest and Last are the oldest and newest retained sequences, 0 when
	// the log is empty. Last is the branch's head.
	Oldest() uint64
	Last() uint64
	// Chunk returns the retained events after after, grouped by commit,
	// looking at n commits at most; a commit that after cuts in the middle
	// is resumed with its remaining events. Each commit goes through keep
	// (the kinds filter), and one it returns nil for is passed over (it
	// still counts towards n). It returns the commits and the last sequence
	// they cover, passed over or not: after when nothing follows it. The
	// caller has checked that after+1 is retained.
	Chunk(after uint64, n int, keep func(Commit) Commit) (out []Commit, through uint64)
	// Frozen returns the log as the branch's delete left it, which a
	// subscription ended while catching up reads through BRANCH_DELETED.
	Frozen() Log
}

// FallibleLog is a Log whose reads can fail: a database's table, whose
// rows another process may have deleted and whose server may be down.
// ChunkErr is Chunk over (after, last] that returns an error instead of
// looping or panicking; the one subscription whose reader got it ends
// with it (issue 16): the replay copied so far is delivered, then Err
// returns the error as a *SequenceError whose Last is the cursor to
// resume from. An engine returns a store sentinel: ErrSubscriberTooSlow
// when the rows it needs are gone, ErrStorageUnavailable when they cannot
// be read, ErrClosed when the store is closed. Memory's log cannot fail
// and is a plain Log.
//
// ChunkErr is called with no lock held: last is Last as the feed's lock
// showed it, every sequence up to it published. A database read can wait
// (for a connection a long export holds, for the server), and the engine
// publishes under the feed's lock: a reader that held the lock across its
// read would hold every write behind it (the writer never waits for a
// watcher). Rows the engine trims meanwhile may be missing from the read:
// Publish has then ended the subscription, and fill discards the read.
type FallibleLog interface {
	Log
	ChunkErr(after, last uint64, n int, keep func(Commit) Commit) (out []Commit, through uint64, err error)
}

// NewFeed returns a branch's feed over its lock and its log.
func NewFeed(mu *sync.RWMutex, log Log) *Feed {
	return &Feed{mu: mu, log: log, subs: map[*Subscription]struct{}{}}
}

// OnIdle sets the function a Close that leaves the feed without
// subscriptions calls, with no lock held (set it before subscribing).
func (f *Feed) OnIdle(fn func()) { f.onIdle = fn }

// Watchers returns the number of open subscriptions (lock held).
func (f *Feed) Watchers() int { return len(f.subs) }

// Subscribe validates a cursor and registers a subscription (Store.Subscribe)
// for the branch id of incarnation; the caller holds the feed's lock for
// writing, so no commit falls between the cursor and the registration.
func (f *Feed) Subscribe(id, incarnation uuid.UUID, in SubscribeInput, lim SubscriptionLimits) (*Subscription, error) {
	head, oldest := f.log.Last(), f.log.Oldest()
	seqErr := func(sentinel error) error {
		return &SequenceError{Err: sentinel, BranchID: id, Head: head, Oldest: oldest}
	}
	if in.Incarnation != nil && *in.Incarnation != incarnation {
		return nil, seqErr(ErrHistoryCompacted)
	}
	for _, k := range in.Kinds {
		if k < EventBranchCreated || k > EventBranchDeleted {
			return nil, fieldErr("kinds", envelope.ErrInvalid, "unknown event kind %d", k)
		}
	}
	if in.After != nil {
		switch after := *in.After; {
		case after > head:
			return nil, seqErr(ErrCursorAhead)
		case after+1 < oldest:
			return nil, seqErr(ErrHistoryCompacted)
		}
	}
	if n := lim.Open.Add(1); lim.Max > 0 && n > int64(lim.Max) {
		lim.Open.Add(-1)
		return nil, &SubscriptionLimitError{BranchID: id, Open: int(n - 1), Limit: lim.Max}
	}
	s := &Subscription{
		BranchID: id, Incarnation: incarnation,
		After: head, Head: head, Oldest: oldest,
		feed: f, kinds: newKindSet(in.Kinds), count: lim.Open, pushed: head, last: head,
	}
	if in.After != nil {
		s.After, s.last, s.pushed = *in.After, *in.After, *in.After
		s.catching = *in.After < head
		s.replaying = s.catching
	}
	s.limit = in.Buffer
	if s.limit <= 0 {
		s.limit = lim.Buffer
	}
	s.ch = make(chan Commit, s.limit+1)
	s.maxBytes = in.BufferBytes
	if s.maxBytes <= 0 {
		s.maxBytes = lim.BufferBytes
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultSubscriberBufferBytes
	}
	f.subs[s] = struct{}{}
	return s, nil
}

// Replay returns the next retained commits after the cursor, a chunk at a
// time, and nil once the subscription has caught up (it is then live, and
// Events carries what follows) or has ended. Read it until nil, then
// Events.
func (s *Subscription) Replay() []Commit {
	s.catchUp()
	r := s.replay
	s.replay = nil
	if len(r) == 0 {
		return nil
	}
	s.last = r[len(r)-1][len(r[len(r)-1])-1].CommitLast
	return r
}

// Events returns the channel of live commits, which follow the replay with
// no gap. It is closed when the subscription ends, after the commits it
// holds; Err then says why.
func (s *Subscription) Events() <-chan Commit { return s.ch }

// Err returns why the subscription ended: ErrSubscriberTooSlow or
// ErrBranchDeleted as a *SequenceError whose Last is the cursor to resume
// from once the replay and Events are drained (every commit up to it was
// delivered or passed over by the kinds filter), or ErrSubscriptionClosed
// after Close. While the subscription is open it returns nil.
func (s *Subscription) Err() error {
	s.feed.mu.RLock()
	reason, pushed := s.reason, s.pushed
	s.feed.mu.RUnlock()
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
	s.catchUp()
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

// catchUp copies chunks of the log into the replay until it holds a commit
// or there is nothing more to copy (reader side).
func (s *Subscription) catchUp() {
	for len(s.replay) == 0 && s.replaying {
		s.fill()
	}
}

// fill copies the next chunk of the log after the cursor into the replay
// under the branch's read lock; when the chunk reaches the head, it takes
// the write lock, copies what was written since and, if that reaches the
// head too, goes live (reader side).
//
// The locks are released by defer: a Log that panics ends this reader's
// call, never leaves the branch locked for its writer. A FallibleLog (a
// database's table) is read with no lock held (fillUnlocked).
func (s *Subscription) fill() {
	if s.fillUnlocked() {
		return
	}
	f := s.feed
	atHead := func() bool {
		f.mu.RLock()
		defer f.mu.RUnlock()
		return s.copyChunk()
	}()
	if !atHead || !s.replaying {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.copyChunk() && s.catching {
		// publish runs under this lock: every commit after pushed is
		// pushed from now on, and every one up to it is in the replay.
		s.catching, s.replaying = false, false
	}
}

// fillUnlocked is fill for a FallibleLog, which it reads with no lock
// held (FallibleLog says why): the bounds under the read lock, the chunk
// after the cursor with none, then, under the write lock, the chunk is
// kept only if the subscription still reads that log (not ended
// meanwhile, as too slow or closed, nor left with the log the branch's
// delete froze, which the next call reads from the same cursor). If the
// chunk reached the log's head, nothing having been published since the
// read, the subscription goes live there (or, on a frozen log, is through
// BRANCH_DELETED); otherwise the next call reads what was. Until it goes
// live it copies from the log what a live one would have been sent, so it
// never stops making progress. It reports false, having done nothing, when
// the log is not a FallibleLog or there is none left to read.
func (s *Subscription) fillUnlocked() bool {
	f := s.feed
	f.mu.RLock()
	log, ok := s.source().(FallibleLog)
	var after, last uint64
	if ok {
		after, last = s.pushed, log.Last()
	}
	f.mu.RUnlock()
	if !ok {
		return false
	}
	var (
		cs      []Commit
		through = after
		err     error
	)
	if after < last {
		cs, through, err = log.ChunkErr(after, last, replayChunk, s.kinds.filter)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case s.source() != log:
		return true // ended, or frozen by the delete, meanwhile: the next call sees which
	case err != nil:
		s.fail(err)
		return true
	}
	s.replay = append(s.replay, cs...)
	s.pushed = through
	if through == log.Last() {
		if s.frozen != nil {
			s.replaying, s.frozen = false, nil // through BRANCH_DELETED (copyChunk)
		} else {
			s.catching, s.replaying = false, false // publish pushes every commit after pushed
		}
	}
	return true
}

// source is the log a subscription copies its replay from (feed lock
// held): the one its branch's delete left, for one ended by it while
// catching up; the branch's while catching up; none once it is live or
// ended.
func (s *Subscription) source() Log {
	switch {
	case s.frozen != nil:
		return s.frozen
	case s.catching:
		return s.feed.log
	}
	return nil
}

// fail ends the subscription with the error its reader got from a
// FallibleLog (feed lock held for writing): unregistered if it is still
// registered; if the branch's delete had already ended it and it was
// reading the frozen log, it did not get BRANCH_DELETED, so that is not
// its end any more. A Close that came first stays the end.
func (s *Subscription) fail(err error) {
	s.replaying = false
	if _, ok := s.feed.subs[s]; ok {
		s.feed.endSub(s, err)
		return
	}
	if s.frozen != nil {
		s.frozen, s.reason = nil, err
	}
}

// copyChunk appends to the replay the next chunk of the log after pushed
// and reports whether the log has nothing after it (branch lock held, read
// or write). When the subscription has ended, or has read the log its
// branch's delete left through to BRANCH_DELETED, there is nothing more
// to replay.
func (s *Subscription) copyChunk() (atEnd bool) {
	log := s.frozen
	if log == nil {
		if !s.catching { // ended, or already live
			s.replaying = false
			return false
		}
		log = s.feed.log
	}
	var (
		cs      []Commit
		through uint64
	)
	cs, through = log.Chunk(s.pushed, replayChunk, s.kinds.filter)
	s.replay = append(s.replay, cs...)
	s.pushed = through
	atEnd = through == log.Last()
	if atEnd && s.frozen != nil {
		// Through BRANCH_DELETED: let go of the deleted branch's log, whose
		// memory the budget no longer counts. Only this reader uses frozen
		// under the read lock; publish and Close set it under the write lock.
		s.replaying, s.frozen = false, nil
	}
	return atEnd
}

// Last returns the last sequence Next (or Replay) delivered, counting the
// events of that commit the kinds filter passed over: the cursor to resume
// from.
func (s *Subscription) Last() uint64 { return s.last }

// CaughtUp reports whether every commit up to the branch's head has been
// read (or passed over by the kinds filter), and that head: then a
// heartbeat may carry head as a cursor that loses nothing. It is false
// while commits are pending (catching up included) and once the
// subscription has ended.
func (s *Subscription) CaughtUp() (head uint64, ok bool) {
	f := s.feed
	f.mu.RLock()
	defer f.mu.RUnlock()
	if _, live := f.subs[s]; !live || s.catching || len(s.replay) > 0 || len(s.ch) > 0 {
		return 0, false
	}
	return f.log.Last(), true
}

// Close ends the subscription and frees its place under the store's limit;
// it is safe to call more than once.
func (s *Subscription) Close() {
	f := s.feed
	if s.close() && f.onIdle != nil {
		f.onIdle()
	}
}

// close is Close under the feed's lock; it reports whether the feed is
// left without subscriptions.
func (s *Subscription) close() (idle bool) {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endSub(s, ErrSubscriptionClosed)
	if s.frozen != nil {
		// Ended by the delete while catching up, and closed before reading
		// through BRANCH_DELETED: it was not delivered, so the end is the
		// close, as for any subscription closed before its end.
		s.frozen, s.reason, s.replaying = nil, ErrSubscriptionClosed, false
	}
	if !s.closed {
		s.closed = true
		s.count.Add(-1)
	}
	return len(f.subs) == 0
}

// endSub unregisters s and closes its channel with reason (feed lock
// held); a subscription already ended is left alone.
func (f *Feed) endSub(s *Subscription, reason error) {
	if _, ok := f.subs[s]; !ok {
		return
	}
	delete(f.subs, s)
	s.reason = reason
	s.catching = false
	close(s.ch)
}

// EndAll ends every open subscription of the feed with reason (feed lock
// held for writing), as a buffer overflow ends one: each delivers what it
// holds, then Err returns reason as a *SequenceError whose Last is the
// cursor to resume from. A database engine calls it when it can no longer
// vouch for the live feed: rows it had not published were deleted
// (ErrSubscriberTooSlow), or its wake-ups from other processes were cut
// (ErrStorageUnavailable, which the server answers UNAVAILABLE: the client
// resumes from its cursor).
func (f *Feed) EndAll(reason error) {
	for s := range f.subs {
		f.endSub(s, reason)
	}
}

// Publish offers a commit to every subscriber without blocking; one whose
// buffer is full, in commits or in bytes (buffered), is ended as too slow
// (feed lock held for writing; the commit is in the log). BRANCH_DELETED
// goes into the slot every buffer keeps for it, so each subscriber still
// open gets it as its last commit, and then ends with ErrBranchDeleted.
// A subscriber catching up copies the commit from the log itself: it is
// ended as too slow if the log has evicted an event it has not copied, and
// at the delete it keeps the log as it is, to read through BRANCH_DELETED.
//
// Every subscriber that takes the whole commit shares it (the same slice,
// the same messages): its bytes are estimated once here, and each
// subscriber counts them against its own bound, although the process holds
// them once. The bound is on what one subscriber pins, which is what its
// reader controls; the sum over subscribers is then an upper bound of the
// memory the buffers hold, exact when each watches another branch.
func (f *Feed) Publish(c Commit) {
	last := c[len(c)-1].CommitLast
	final := c[0].Kind == EventBranchDeleted
	size := int64(-1) // c's commitBytes, once a subscriber takes it whole
	for s := range f.subs {
		if s.catching {
			switch {
			case s.pushed+1 < f.log.Oldest():
				f.endSub(s, ErrSubscriberTooSlow) // resumes from pushed, which it has copied
			case final:
				s.frozen = f.log.Frozen()
				f.endSub(s, ErrBranchDeleted)
			}
			continue
		}
		fc := s.kinds.filter(c)
		if fc == nil {
			s.pushed = last // nothing for it: passed over
			continue
		}
		n := size
		switch {
		case len(fc) < len(c): // filtered: a commit of its own
			n = commitBytes(fc)
		case size < 0:
			size = commitBytes(c)
			n = size
		}
		if !final && !s.fits(n) {
			f.endSub(s, ErrSubscriberTooSlow)
			continue
		}
		s.ch <- fc // never blocks: len(s.ch) < cap(s.ch), and only the lock holder sends
		s.held.Add(n)
		s.pushed = last
		if final {
			f.endSub(s, ErrBranchDeleted)
		}
	}
}

// fits reports whether a commit of n bytes may join s's buffer (feed lock
// held for writing): fewer than limit commits are buffered, and the bytes
// buffered with it are at most maxBytes, or nothing is buffered. A commit
// larger than the bound on its own is taken into an empty buffer: a reader
// that keeps up must get every commit live, whatever its size, and one
// commit is what the frame being sent holds anyway.
func (s *Subscription) fits(n int64) bool {
	s.held.Release(len(s.ch))
	if len(s.ch) >= s.limit {
		return false
	}
	return s.held.Fits(n, s.maxBytes)
}
