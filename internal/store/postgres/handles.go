package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
)

// A handle is what this replica holds of a branch that has subscribers or
// observers here: its lock, its store.Feed, and the head and oldest
// sequence of its log as published to them. Publication has ONE path,
// advance (under the handle's write lock): it publishes the commits after
// the log's last up to a head, in order, taking them from the caller's
// hands (a local write, right after its COMMIT) or reading them from the
// events table (a write made elsewhere, or one this replica's writer has
// not published yet). So commits reach subscribers in sequence order with
// no gap, whichever replica wrote them and in whatever order the wake-ups
// come. A branch nobody watches here costs nothing.
type handle struct {
	mu          sync.RWMutex
	id          uuid.UUID
	incarnation uuid.UUID
	feed        *store.Feed
	log         *dbLog

	observers []observerEntry
	nextObs   uint64
	pins      int  // calls between getting the handle and using it (Store.mu)
	deleted   bool // BRANCH_DELETED published (h.mu)
	// gap is set by a reader that found rows of the log gone (a replica
	// lagging by more than the rows the writers keep): the next advance
	// ends the subscribers as too slow.
	gap atomic.Bool
	// broken is set by a reader that could not read the log (the server
	// unreachable): the puller ends the subscribers with it.
	broken atomic.Pointer[StorageError]
	// oldest mirrors log.oldest for the writers' trim (sweepBelow), which
	// runs inside a write transaction and so never waits for the handle's
	// lock (a reader may hold it across a read of the log).
	oldest atomic.Uint64
}

type observerEntry struct {
	id uint64
	fn store.Observer
}

// dbLog is a branch's event log as subscriptions read it (store.Log): the
// events table, bounded by the head and oldest sequence published, which
// change under the handle's lock.
type dbLog struct {
	s           *Store
	h           *handle
	branch      uuid.UUID
	incarnation uuid.UUID
	oldest      uint64
	last        uint64
}

var _ store.Log = (*dbLog)(nil)

func (l *dbLog) Oldest() uint64 { return l.oldest }
func (l *dbLog) Last() uint64   { return l.last }

// chunkRetries is how many times a reader tries a read of the log before
// it gives up on the server: then the handle's subscribers are ended with
// store.ErrStorageUnavailable (retryable) by the puller, which can take
// the handle's write lock the reader holds for reading.
const chunkRetries = 3

// Chunk reads the events after after from the table (store.Log). It never
// panics: a read that keeps failing, or rows found gone, end the branch's
// subscribers through the puller (endFlagged), and meanwhile the reader
// copies nothing.
func (l *dbLog) Chunk(after uint64, n int, keep func(store.Commit) store.Commit) ([]store.Commit, uint64) {
	// A commit has at most two events (CreateActionResponse), so 2n rows
	// hold n commits.
	var (
		evs []store.Event
		err error
	)
	for attempt := range chunkRetries {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		evs, err = readEvents(ctx, l.s.pool, l.branch, l.incarnation, after, l.last, 2*n)
		cancel()
		if err == nil || l.s.closed.Load() {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond) // a backoff, not synchronisation
	}
	switch {
	case err != nil:
		l.h.broken.Store(&StorageError{Target: l.s.target, Err: store.ErrStorageUnavailable, Cause: err})
	case after < l.last && (len(evs) == 0 || evs[0].Sequence != after+1):
		// Trimmed by writers on other replicas while this one lagged: the
		// subscribers are too slow.
		l.h.gap.Store(true)
	default:
		return l.chunk(after, n, evs, keep)
	}
	l.s.wake.pull(l.branch, l.incarnation, 0)
	time.Sleep(10 * time.Millisecond) // a backoff while the puller takes the lock
	return nil, after
}

// chunk groups the events read into at most n commits.
func (l *dbLog) chunk(after uint64, n int, evs []store.Event, keep func(store.Commit) store.Commit) ([]store.Commit, uint64) {
	through := after
	var out []store.Commit
	commits := 0
	for len(evs) > 0 && commits < n {
		k := 1
		for k < len(evs) && evs[k].CommitFirst == evs[0].CommitFirst {
			k++
		}
		if k == len(evs) && evs[k-1].Sequence < evs[k-1].CommitLast {
			break // the rest of this commit is past the rows read: next chunk
		}
		if c := keep(evs[:k:k]); c != nil {
			out = append(out, c)
		}
		through = evs[k-1].Sequence
		evs = evs[k:]
		commits++
	}
	return out, through
}

// Frozen returns the log as the delete left it (store.Log); the deleted
// incarnation's rows stay for deadGrace (janitor.go).
func (l *dbLog) Frozen() store.Log {
	cp := *l
	return &cp
}

// retainedFrom is the oldest sequence the log keeps with head as its head.
func (s *Store) retainedFrom(head uint64) uint64 {
	r := uint64(s.cfg.EventRetention)
	if head < r {
		return 1
	}
	return head - r + 1
}

// sweepBelow is the sequence below which a write bringing a branch's head
// to head deletes its events: a retention below what the log reports
// retained (twice the retention is kept; commitEvents deletes only every
// trimEvery events, so up to trimEvery-1 more), and never what this
// replica's subscribers were told is retained.
func (s *Store) sweepBelow(id, incarnation uuid.UUID, head uint64) uint64 {
	below := s.retainedFrom(head)
	if r := uint64(s.cfg.EventRetention); below > r {
		below -= r
	} else {
		below = 1
	}
	if h := s.handleOf(id, incarnation); h != nil {
		below = min(below, h.oldest.Load())
	}
	return below
}

// handleOf returns the branch's handle if it is of incarnation.
func (s *Store) handleOf(id, incarnation uuid.UUID) *handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.handles[id]; h != nil && h.incarnation == incarnation {
		return h
	}
	return nil
}

func (s *Store) allHandles() []*handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*handle, 0, len(s.handles))
	for _, h := range s.handles {
		out = append(out, h)
	}
	return out
}

// committed follows a local write's COMMIT: the other replicas are woken
// (wake.go), and this one's subscribers get the commit from its hands.
func (s *Store) committed(id, incarnation uuid.UUID, c store.Commit) {
	head := c[len(c)-1].Sequence
	s.wake.notify(id, incarnation, head)
	if h := s.handleOf(id, incarnation); h != nil {
		s.advance(h, head, c)
	}
}

// advanceBatch is how many events advance reads at a time.
const advanceBatch = 512

// advance publishes the branch's commits after the log's last through
// head (handle locked for writing): c, when it is the next commit, from
// the caller's hands; otherwise from the events table. A read that fails
// leaves the log where it is (the next wake-up or sweep retries); rows
// found gone end the subscribers as too slow.
func (s *Store) advance(h *handle, head uint64, c store.Commit) {
	h.mu.Lock()
	s.advanceLocked(h, head, c)
	deleted := h.deleted
	h.mu.Unlock()
	if deleted {
		s.mu.Lock()
		if s.handles[h.id] == h {
			delete(s.handles, h.id)
		}
		s.mu.Unlock()
	}
}

func (s *Store) advanceLocked(h *handle, head uint64, c store.Commit) {
	if h.deleted {
		return
	}
	s.endFlagged(h)
	if h.log.last >= head {
		return
	}
	if c != nil && c[0].Sequence == h.log.last+1 {
		s.publish(h, c)
		return
	}
	for h.log.last < head && !h.deleted {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		evs, err := readEvents(ctx, s.pool, h.id, h.incarnation, h.log.last, head, advanceBatch)
		cancel()
		if err != nil {
			return
		}
		if len(evs) == 0 || evs[0].Sequence != h.log.last+1 {
			s.lost(h, head)
			return
		}
		for len(evs) > 0 {
			k := 1
			for k < len(evs) && evs[k].CommitFirst == evs[0].CommitFirst {
				k++
			}
			if k == len(evs) && evs[k-1].Sequence < evs[k-1].CommitLast {
				break // cut by the batch: read again from its first event
			}
			s.publish(h, store.Commit(evs[:k:k]))
			evs = evs[k:]
		}
	}
}

// endFlagged ends the subscribers as a reader flagged (handle locked for
// writing): too slow when it found rows gone, unavailable when it could
// not read them.
func (s *Store) endFlagged(h *handle) {
	if h.gap.Swap(false) {
		s.lost(h, 0)
	}
	if err := h.broken.Swap(nil); err != nil {
		h.feed.EndAll(err)
	}
}

// publish hands one commit to the branch's subscribers (handle locked for
// writing): the log reports it retained first, as Feed.Publish expects.
func (s *Store) publish(h *handle, c store.Commit) {
	last := c[len(c)-1].Sequence
	h.log.last = last
	h.log.oldest = max(h.log.oldest, s.retainedFrom(last))
	h.oldest.Store(h.log.oldest)
	h.feed.Publish(c)
	if c[0].Kind == store.EventBranchDeleted {
		h.deleted = true
	}
}

// lost ends the branch's subscribers as too slow: rows of its log were
// deleted before this replica published them (it lagged the writers by
// more than twice the retention). The log starts again at head (0: where
// it is), from rows that exist.
func (s *Store) lost(h *handle, head uint64) {
	h.feed.EndAll(store.ErrSubscriberTooSlow)
	if head > h.log.last {
		h.log.last = head
	}
	h.log.oldest = max(h.log.oldest, s.retainedFrom(h.log.last))
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	var oldest int64
	if err := s.pool.QueryRow(ctx, qOldestEvent, h.incarnation).Scan(&oldest); err == nil {
		h.log.oldest = max(h.log.oldest, uint64(oldest))
	}
	if h.log.oldest > h.log.last && h.log.last > 0 {
		h.log.oldest = h.log.last
	}
	h.oldest.Store(h.log.oldest)
}

// catchUp brings a handle to what the database says of its branch: the
// head of its incarnation, or, when the branch is gone or of another
// incarnation, through the old incarnation's BRANCH_DELETED. found, inc
// and head are the branch's row as read.
func (s *Store) catchUp(ctx context.Context, h *handle, found bool, inc uuid.UUID, head uint64) error {
	if found && inc == h.incarnation {
		s.advance(h, head, nil)
		return nil
	}
	var last int64
	if err := s.pool.QueryRow(ctx, qLastEvent, h.incarnation).Scan(&last); err != nil {
		return s.fault(ctx, err)
	}
	s.advance(h, uint64(last), nil)
	h.mu.Lock()
	if !h.deleted {
		// Its log is gone too (past the grace): nothing to read through.
		h.feed.EndAll(store.ErrBranchDeleted)
		h.deleted = true
	}
	h.mu.Unlock()
	s.mu.Lock()
	if s.handles[h.id] == h {
		delete(s.handles, h.id)
	}
	s.mu.Unlock()
	return nil
}

// sync reads the branch's row and catches the handle up to it: a write
// acknowledged by any replica is then published here.
func (s *Store) sync(ctx context.Context, h *handle) error {
	var (
		inc   uuid.UUID
		head  int64
		found = true
	)
	err := s.pool.QueryRow(ctx, `SELECT incarnation, head FROM branches WHERE tenant = '' AND id = $1`, h.id).Scan(&inc, &head)
	switch {
	case isNoRows(err):
		found = false
	case err != nil:
		return s.fault(ctx, err)
	}
	return s.catchUp(ctx, h, found, inc, uint64(head))
}

// pin returns the branch's handle, made from a read of its row and
// oldest event if there is none, pinned so that it is not let go before
// the caller uses it; fresh is true when this call made it (from the
// database's head). An unknown branch is ErrBranchNotFound.
func (s *Store) pin(ctx context.Context, id uuid.UUID) (h *handle, fresh bool, err error) {
	s.mu.Lock()
	if h := s.handles[id]; h != nil {
		h.pins++
		s.mu.Unlock()
		return h, false, nil
	}
	s.mu.Unlock()
	var (
		row    *branchRow
		oldest int64
	)
	err = s.read(ctx, func(tx pgxTx) error {
		var err error
		if row, err = loadBranch(ctx, tx, qBranch, id); err != nil {
			return err
		}
		return tx.QueryRow(ctx, qOldestEvent, row.incarnation).Scan(&oldest)
	})
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h = s.handles[id]; h == nil {
		h, fresh = s.newHandle(row, uint64(oldest)), true
		s.handles[id] = h
	}
	h.pins++
	return h, fresh, nil
}

func (s *Store) newHandle(row *branchRow, minSeq uint64) *handle {
	h := &handle{id: row.id, incarnation: row.incarnation}
	oldest := uint64(0)
	if row.head > 0 {
		oldest = max(minSeq, s.retainedFrom(row.head), 1)
	}
	h.log = &dbLog{s: s, h: h, branch: row.id, incarnation: row.incarnation, oldest: oldest, last: row.head}
	h.oldest.Store(oldest)
	h.feed = store.NewFeed(&h.mu, h.log)
	h.feed.OnIdle(func() { // the last subscription closed: let the handle go if nothing else uses it
		s.mu.Lock()
		defer s.mu.Unlock()
		s.release(h)
	})
	return h
}

// unpin lets go of a pin, and of the handle once nothing uses it.
func (s *Store) unpin(h *handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.pins--
	s.release(h)
}

// release drops the handle from the map when nothing uses it (s.mu held).
func (s *Store) release(h *handle) {
	if h.pins > 0 || s.handles[h.id] != h {
		return
	}
	h.mu.RLock()
	idle := h.feed.Watchers() == 0 && len(h.observers) == 0
	h.mu.RUnlock()
	if idle {
		delete(s.handles, h.id)
	}
}

// endAll ends every subscriber of this replica with err (the LISTEN
// connection was lost: what was written meanwhile may not reach them in
// time; they resume from their cursors).
func (s *Store) endAll(err error) {
	for _, h := range s.allHandles() {
		h.mu.Lock()
		h.feed.EndAll(err)
		h.mu.Unlock()
	}
}
