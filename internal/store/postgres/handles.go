package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// A handle is what this replica holds of a branch that has subscribers or
// observers here: its lock, its store.Feed, and the head and oldest
// sequence of its log as published to them. Publication has ONE path,
// advance: it publishes the commits after the log's last up to a head, in
// order, taking them from the caller's hands (a local write, right after
// its COMMIT) or reading them from the events table (a write made
// elsewhere, or one this replica's writer has not published yet) before
// it takes the handle's write lock to publish them. So commits reach subscribers in sequence order with
// no gap, whichever replica wrote them and in whatever order the wake-ups
// come. A branch nobody watches here costs nothing.
type handle struct {
	mu          sync.RWMutex
	id          uuid.UUID
	incarnation uuid.UUID
	feed        *store.Feed
	log         *dbLog

	observers store.Observers
	pins      int    // calls between getting the handle and using it (Store.mu)
	gen       uint64 // pins ever taken (Store.mu): release drops the handle only if none came meanwhile
	deleted   bool   // BRANCH_DELETED published (h.mu)
	// floor is the oldest row a reader found left of the log when rows it
	// needed were gone (trimmed by writers on other replicas while this
	// one lagged): the log reports no older sequence retained, so a new
	// cursor below it is told the history is compacted.
	floor atomic.Uint64
	// oldest mirrors log.oldest for the writers' trim (sweepBelow), which
	// runs inside a write transaction and so never waits for the handle's
	// lock (a reader may hold it across a read of the log).
	oldest atomic.Uint64
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

var _ store.FallibleLog = (*dbLog)(nil)

func (l *dbLog) Oldest() uint64 { return max(l.oldest, l.h.floor.Load()) }
func (l *dbLog) Last() uint64   { return l.last }

// Chunk is ChunkErr without its error (store.Log); store.Feed reads a
// FallibleLog through ChunkErr, so nothing calls it.
func (l *dbLog) Chunk(after uint64, n int, keep func(store.Commit) store.Commit) ([]store.Commit, uint64) {
	out, through, _ := l.ChunkErr(after, l.last, n, keep)
	return out, through
}

// ChunkErr reads the events in (after, last] from the table
// (store.FallibleLog), once, with no lock held: no retry and no sleep
// (issue 16 review 2), and the writers publishing to the handle never wait
// for it (a read may wait for a pool connection). A read that fails ends the one subscription reading it
// (issue 16 review 1: the puller cannot, once the branch's delete or Close
// let go of the handle): ErrStorageUnavailable (it resumes from its
// cursor), or ErrClosed after Close. Rows gone (trimmed while this replica
// lagged, or the deleted branch's log past deadGrace) end it as too slow,
// it alone (issue 16 review 4): the live subscribers lack nothing.
func (l *dbLog) ChunkErr(after, last uint64, n int, keep func(store.Commit) store.Commit) ([]store.Commit, uint64, error) {
	if l.s.closed.Load() {
		return nil, after, store.ErrClosed
	}
	// A commit has at most two events (CreateActionResponse), so 2n rows
	// hold n commits.
	ctx, cancel := context.WithTimeout(l.s.ctx, 10*time.Second)
	defer cancel()
	evs, err := readEvents(ctx, l.s.pool, l.branch, l.incarnation, after, last, 2*n)
	switch {
	case err != nil:
		return nil, after, l.s.unavailable(ctx, err)
	case after < last && (len(evs) == 0 || evs[0].Sequence != after+1):
		if len(evs) > 0 {
			raise(&l.h.floor, evs[0].Sequence)
		}
		return nil, after, store.ErrSubscriberTooSlow
	}
	out, through := l.chunk(after, n, evs, keep)
	return out, through, nil
}

// raise sets a to v if v is higher.
func raise(a *atomic.Uint64, v uint64) {
	for old := a.Load(); v > old && !a.CompareAndSwap(old, v); old = a.Load() {
	}
}

// unavailable is a failed read of the log as its subscribers are told: a
// *StorageError (ErrStorageUnavailable unless fault sorts it otherwise),
// or ErrClosed once the Store is closed.
func (s *Store) unavailable(ctx context.Context, err error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if se := new(*StorageError); errors.As(s.fault(ctx, err), se) {
		return *se
	}
	return &StorageError{Target: s.target, Err: store.ErrStorageUnavailable, Cause: err}
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
// replica's subscribers were told is retained. It runs inside the write's
// transaction, holding its branch's row lock, so it takes no lock (issue
// 16 review 2): the handle map is a sync.Map, the handle's oldest an
// atomic.
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

// handleOf returns the branch's handle if it is of incarnation, without
// a lock.
func (s *Store) handleOf(id, incarnation uuid.UUID) *handle {
	if v, ok := s.handles.Load(id); ok {
		if h := v.(*handle); h.incarnation == incarnation {
			return h
		}
	}
	return nil
}

func (s *Store) allHandles() []*handle {
	var out []*handle
	s.handles.Range(func(_, v any) bool {
		out = append(out, v.(*handle))
		return true
	})
	return out
}

// forget drops a deleted branch's handle from the map.
func (s *Store) forget(h *handle) {
	s.mu.Lock()
	s.handles.CompareAndDelete(h.id, h)
	s.mu.Unlock()
}

// committed follows a local write's COMMIT: the other replicas are woken
// (wake.go), and this one's subscribers get the commit from its hands.
func (s *Store) committed(id, incarnation uuid.UUID, c store.Commit) {
	head := c[len(c)-1].Sequence
	s.wake.notify(id, incarnation, head)
	if h := s.handleOf(id, incarnation); h != nil {
		s.advance(h, head, c) //nolint:errcheck // the commit is published from its hands, or by the next wake-up or sweep
	}
}

// advanceBatch is how many events advance reads at a time.
const advanceBatch = 512

// advance publishes the branch's commits after the log's last through
// head: c, when it is the next commit, from the caller's hands; otherwise
// from the events table. The read runs without the handle's lock, which
// is taken only to publish, skipping what another caller published
// meanwhile (issue 16 review 2: a read waiting for a pool connection held
// it, stalling the local acks, the listener and release). A read that
// fails is returned, a *StorageError (issue 16 review 3): the log stays
// where it is, and the next wake-up or sweep retries. Rows found gone end
// the subscribers as too slow.
func (s *Store) advance(h *handle, head uint64, c store.Commit) error {
	err := s.advanceTo(h, head, c)
	h.mu.RLock()
	deleted := h.deleted
	h.mu.RUnlock()
	if deleted {
		s.forget(h)
	}
	return err
}

// publishNext publishes c from the caller's hands when it is the next
// commit of h's log, and reports whether it was.
func (s *Store) publishNext(h *handle, c store.Commit) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := !h.deleted && c[0].Sequence == h.log.last+1
	if next {
		s.publish(h, c)
	}
	return next
}

func (s *Store) advanceTo(h *handle, head uint64, c store.Commit) error {
	if c != nil && s.publishNext(h, c) {
		return nil
	}
	for {
		h.mu.RLock()
		last, done := h.log.last, h.deleted || h.log.last >= head
		h.mu.RUnlock()
		if done {
			return nil
		}
		evs, oldest, err := s.readAfter(h, last, head)
		if err != nil {
			return err
		}
		h.mu.Lock()
		switch {
		case h.deleted || h.log.last != last && evs == nil:
			// Published or lost meanwhile: read again from there.
		case evs == nil:
			s.lost(h, head, oldest)
		default:
			s.publishRead(h, evs)
		}
		progressed := h.log.last != last
		h.mu.Unlock()
		if !progressed {
			return nil // nothing to publish yet (a commit cut by the batch and no more): the sweep retries
		}
	}
}

// readAfter reads the events after last through head (no lock held);
// when the first is gone (trimmed), evs is nil and oldest the oldest left.
func (s *Store) readAfter(h *handle, last, head uint64) (evs []store.Event, oldest uint64, err error) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	evs, err = readEvents(ctx, s.pool, h.id, h.incarnation, last, head, advanceBatch)
	if err != nil {
		return nil, 0, s.unavailable(ctx, err)
	}
	if len(evs) > 0 && evs[0].Sequence == last+1 {
		return evs, 0, nil
	}
	var o int64
	if err := s.pool.QueryRow(ctx, qOldestEvent, h.incarnation).Scan(&o); err != nil {
		return nil, 0, s.unavailable(ctx, err)
	}
	return nil, uint64(o), nil
}

// publishRead publishes the whole commits of evs that follow the log's
// last (handle locked for writing); those another caller published since
// the read are passed over.
func (s *Store) publishRead(h *handle, evs []store.Event) {
	for len(evs) > 0 && !h.deleted {
		k := 1
		for k < len(evs) && evs[k].CommitFirst == evs[0].CommitFirst {
			k++
		}
		if k == len(evs) && evs[k-1].Sequence < evs[k-1].CommitLast {
			return // cut by the batch: read again from its first event
		}
		c := store.Commit(evs[:k:k])
		evs = evs[k:]
		switch {
		case c[len(c)-1].Sequence <= h.log.last:
			continue // published meanwhile
		case c[0].Sequence != h.log.last+1:
			return // cannot happen: the log moves by whole commits
		}
		s.publish(h, c)
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

// lost ends the branch's subscribers as too slow (handle locked for
// writing): rows of its log were deleted before this replica published
// them (it lagged the writers by more than twice the retention). The log
// starts again at head, from rows that exist (oldest, read by the caller
// before it locked).
func (s *Store) lost(h *handle, head, oldest uint64) {
	h.feed.EndAll(store.ErrSubscriberTooSlow)
	if head > h.log.last {
		h.log.last = head
	}
	h.log.oldest = max(h.log.oldest, s.retainedFrom(h.log.last), oldest)
	if h.log.oldest > h.log.last && h.log.last > 0 {
		h.log.oldest = h.log.last
	}
	h.oldest.Store(h.log.oldest)
}

// catchUp brings a handle to what the database says of its branch: the
// head of its incarnation, or, when the branch is gone or of another
// incarnation, through the old incarnation's BRANCH_DELETED. found, inc
// and head are the branch's row as read. A read that fails is its error
// (ErrStorageUnavailable); the handle is marked deleted only after a
// read that succeeded (issue 16 review 3).
func (s *Store) catchUp(ctx context.Context, h *handle, found bool, inc uuid.UUID, head uint64) error {
	if found && inc == h.incarnation {
		return s.advance(h, head, nil)
	}
	var last int64
	if err := s.pool.QueryRow(ctx, qLastEvent, h.incarnation).Scan(&last); err != nil {
		return s.unavailable(ctx, err)
	}
	if err := s.advance(h, uint64(last), nil); err != nil {
		return err
	}
	h.mu.Lock()
	if !h.deleted {
		// Its log is gone too (past the grace): nothing to read through.
		h.feed.EndAll(store.ErrBranchDeleted)
		h.deleted = true
	}
	h.mu.Unlock()
	s.forget(h)
	return nil
}

// sync reads the branch's row and catches the handle up to it: a write
// acknowledged by any replica is then published here, or sync fails.
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
		return s.unavailable(ctx, err)
	}
	return s.catchUp(ctx, h, found, inc, uint64(head))
}

// pin returns the branch's handle, made from a read of its row and
// oldest event if there is none, pinned so that it is not let go before
// the caller uses it; fresh is true when this call made it (from the
// database's head). An unknown branch is ErrBranchNotFound.
func (s *Store) pin(ctx context.Context, id uuid.UUID) (h *handle, fresh bool, err error) {
	s.mu.Lock()
	if v, ok := s.handles.Load(id); ok {
		h := v.(*handle)
		h.pins++
		h.gen++
		s.mu.Unlock()
		return h, false, nil
	}
	s.mu.Unlock()
	var (
		row    *sqlrow.Branch
		oldest int64
	)
	err = s.read(ctx, func(tx pgxTx) error {
		var err error
		if row, err = loadBranch(ctx, tx, qBranch, id); err != nil {
			return err
		}
		return tx.QueryRow(ctx, qOldestEvent, row.Incarnation).Scan(&oldest)
	})
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.handles.Load(id); ok {
		h = v.(*handle)
	} else {
		h, fresh = s.newHandle(row, uint64(oldest)), true
		s.handles.Store(id, h)
	}
	h.pins++
	h.gen++
	return h, fresh, nil
}

func (s *Store) newHandle(row *sqlrow.Branch, minSeq uint64) *handle {
	h := &handle{id: row.ID, incarnation: row.Incarnation}
	oldest := uint64(0)
	if row.Head > 0 {
		oldest = max(minSeq, s.retainedFrom(row.Head), 1)
	}
	h.log = &dbLog{s: s, h: h, branch: row.ID, incarnation: row.Incarnation, oldest: oldest, last: row.Head}
	h.oldest.Store(oldest)
	h.feed = store.NewFeed(&h.mu, h.log)
	// The last subscription closed: let the handle go if nothing else uses it.
	h.feed.OnIdle(func() { s.release(h) })
	return h
}

// unpin lets go of a pin, and of the handle once nothing uses it.
func (s *Store) unpin(h *handle) {
	s.mu.Lock()
	h.pins--
	s.mu.Unlock()
	s.release(h)
}

// release drops the handle from the map when nothing uses it (no lock
// held). It never waits for the handle's lock holding s.mu (issue 16
// review 2: a publisher holds it): it reads the handle's use under h.mu
// alone, then drops it under s.mu only if no pin was taken meanwhile
// (gen), since every subscriber and observer is added under a pin.
func (s *Store) release(h *handle) {
	s.mu.Lock()
	v, _ := s.handles.Load(h.id)
	if h.pins > 0 || v != h {
		s.mu.Unlock()
		return
	}
	gen := h.gen
	s.mu.Unlock()
	h.mu.RLock()
	idle := h.feed.Watchers() == 0 && h.observers.Len() == 0
	h.mu.RUnlock()
	if !idle {
		return
	}
	s.mu.Lock()
	if h.pins == 0 && h.gen == gen {
		s.handles.CompareAndDelete(h.id, h)
	}
	s.mu.Unlock()
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
