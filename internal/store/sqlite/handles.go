package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// A handle is what memory holds of a branch that has subscribers or
// observers: its lock, its store.Feed, and the head and oldest sequence of
// its log as published. The writer goroutine makes handles (in a job, so
// that the head it reads and the commits it publishes afterwards line up),
// publishes each commit to the handle of its branch after the commit, and
// lets a handle go once nothing uses it; a branch nobody watches costs no
// memory.
type handle struct {
	mu          sync.RWMutex
	id          uuid.UUID
	incarnation uuid.UUID
	feed        *store.Feed
	log         *dbLog

	observers store.Observers
	pins      int // calls between getting the handle and using it (Store.mu)
	deleted   bool
}

// dbLog is a branch's event log as subscriptions read it (store.Log): the
// events table, bounded by the head and oldest sequence published, which
// change under the handle's lock. Rows below oldest may linger (the writer
// deletes them behind what was published, so a reader under the lock
// never finds a retained row gone).
type dbLog struct {
	s           *Store
	branch      uuid.UUID
	incarnation uuid.UUID
	oldest      uint64
	last        uint64
	frozen      *atomic.Int32 // frozen copies alive; the deleted log's rows go with the last
}

var _ store.FallibleLog = (*dbLog)(nil)

func (l *dbLog) Oldest() uint64 { return l.oldest }
func (l *dbLog) Last() uint64   { return l.last }

// Chunk is ChunkErr up to the log's last, without its error (store.Log);
// store.Feed reads a FallibleLog through ChunkErr, so nothing calls it.
func (l *dbLog) Chunk(after uint64, n int, keep func(store.Commit) store.Commit) ([]store.Commit, uint64) {
	out, through, _ := l.ChunkErr(after, l.last, n, keep)
	return out, through
}

// chunkReadTimeout bounds a catching-up subscription's read of its log
// (ChunkErr), as the PostgreSQL engine's.
const chunkReadTimeout = 10 * time.Second

// ChunkErr reads the events in (after, last] from the table
// (store.FallibleLog), once, with no lock held: the writer, which
// publishes to the handle under its lock, never waits for this read, which
// may wait for a read connection as long as an export holds one. A read
// that fails ends the one subscription reading it (its client resumes):
// ErrClosed once the store is closed, ErrStorageUnavailable when it waited
// chunkReadTimeout, else the error as fault sorts it (a *StorageError for
// a storage fault). An event missing from the rows read
// is a damaged log (ErrStorageDamaged) unless the writer trimmed it
// meanwhile: it deletes rows only below an oldest it has published, and
// that publish ended every subscription catching up from below it
// (store.Feed.Publish), whose read store.Feed then discards.
func (l *dbLog) ChunkErr(after, last uint64, n int, keep func(store.Commit) store.Commit) ([]store.Commit, uint64, error) {
	if l.s.closed.Load() {
		return nil, after, ErrClosed
	}
	// A commit has at most two events (CreateActionResponse), so 2n rows
	// hold n commits. The wait for a read connection is bounded, as
	// PostgreSQL's is: the subscription's reader (and its place under the
	// limit of subscriptions) is not held for as long as exports hold
	// every connection; its client resumes.
	ctx, cancel := context.WithTimeout(context.Background(), chunkReadTimeout)
	defer cancel()
	evs, err := l.s.readEvents(ctx, l.branch, l.incarnation, after, last, 2*n)
	switch {
	case err == nil:
	case l.s.closed.Load():
		return nil, after, ErrClosed
	case ctx.Err() != nil:
		return nil, after, &StorageError{File: l.s.db.Path, Err: store.ErrStorageUnavailable, Cause: err}
	default:
		return nil, after, l.s.fault(err)
	}
	for i, want := 0, after+1; i < len(evs) || (i == 0 && after < last); i, want = i+1, want+1 {
		if i == len(evs) || evs[i].Sequence != want {
			return nil, after, &StorageError{File: l.s.db.Path, Err: store.ErrStorageDamaged,
				Cause: fmt.Errorf("sqlite: the event log of incarnation %s has no event %d", l.incarnation, want)}
		}
	}
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
	return out, through, nil
}

// Frozen returns the log as the delete left it (store.Log); its rows are
// kept until the last frozen copy is collected.
func (l *dbLog) Frozen() store.Log {
	cp := &dbLog{s: l.s, branch: l.branch, incarnation: l.incarnation, oldest: l.oldest, last: l.last, frozen: l.frozen}
	l.frozen.Add(1)
	s, inc, count := l.s, l.incarnation, l.frozen
	runtime.AddCleanup(cp, func(struct{}) {
		if count.Add(-1) == 0 {
			s.sweep(inc)
		}
	}, struct{}{})
	return cp
}

// sweep asks the janitor to delete a deleted incarnation's events; it
// never blocks (a full queue leaves them to the sweep at the next start).
func (s *Store) sweep(incarnation uuid.UUID) {
	select {
	case s.sweeps <- incarnation:
	default:
	}
}

// runJanitor deletes the event logs of deleted incarnations as sweep asks.
// Owner: the Store; stopped by Close.
func (s *Store) runJanitor() {
	defer s.janitor.Done()
	for {
		select {
		case <-s.stop:
			return
		case inc := <-s.sweeps:
			_ = s.w.do(context.Background(), func(ctx context.Context, tx *sql.Tx) error { return s.deleteLog(ctx, tx, inc) }, nil)
		}
	}
}

// deadMark is the store_meta key that marks a deleted incarnation whose
// events are still to delete.
func deadMark(inc uuid.UUID) string { return "dead-incarnation:" + inc.String() }

// deleteLog deletes a deleted incarnation's events and its mark.
func (s *Store) deleteLog(ctx context.Context, tx *sql.Tx, inc uuid.UUID) error {
	if _, err := s.wst.exec(ctx, tx, qDeleteEvents, blob(inc)); err != nil {
		return err
	}
	_, err := s.wst.exec(ctx, tx, qUnmarkDead, deadMark(inc))
	return err
}

// sweepOrphans deletes, at start, the events of the deleted incarnations
// still marked (their subscribers went with the process that served
// them): the work is what the last process left undone, not a scan of the
// log, so the start does not grow with the database.
func (s *Store) sweepOrphans(ctx context.Context) error {
	rows, err := s.db.write.QueryContext(ctx, qDeadMarks)
	if err != nil {
		return fmt.Errorf("sqlite: sweeping deleted branches' events: %w", err)
	}
	var dead []uuid.UUID
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			rows.Close()
			return err
		}
		if inc, err := uuid.Parse(strings.TrimPrefix(key, "dead-incarnation:")); err == nil {
			dead = append(dead, inc)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, inc := range dead {
		tx, err := s.db.write.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := s.deleteLog(ctx, tx, inc); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: sweeping deleted branch events: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// pin returns the branch's handle, made on the writer goroutine if there
// is none, pinned so that it is not let go before the caller uses it; the
// caller unpins it. An unknown branch is ErrBranchNotFound.
func (s *Store) pin(ctx context.Context, id uuid.UUID) (*handle, error) {
	s.mu.Lock()
	if h := s.handles[id]; h != nil {
		h.pins++
		s.mu.Unlock()
		return h, nil
	}
	s.mu.Unlock()
	var (
		h   *handle
		row *sqlrow.Branch
		min sql.NullInt64
	)
	// Read-only: a pin goes on when the disk is full (writer.commit).
	err := s.w.doReadOnly(ctx, func(ctx context.Context, tx *sql.Tx) error {
		row, min = nil, sql.NullInt64{} // a re-run of the batch starts afresh (writer.do)
		var err error
		if row, err = s.loadBranch(ctx, &s.wst, tx, id); err != nil {
			return err
		}
		if err := s.wst.queryRow(ctx, tx, qOldestEvent, blob(row.Incarnation)).Scan(&min); err != nil {
			return err
		}
		s.pinning[id]++ // a delete later in the batch keeps the log (DeleteBranch)
		return nil
	}, func() {
		if s.pinning[id]--; s.pinning[id] == 0 {
			delete(s.pinning, id)
		}
		// After the commits before this job were published: the head read
		// above is the head every later commit follows.
		s.mu.Lock()
		defer s.mu.Unlock()
		if h = s.handles[id]; h == nil {
			h = s.newHandle(row, uint64(min.Int64))
			s.handles[id] = h
		}
		h.pins++
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (s *Store) newHandle(row *sqlrow.Branch, minSeq uint64) *handle {
	h := &handle{id: row.ID, incarnation: row.Incarnation}
	oldest := uint64(0)
	if row.Head > 0 {
		oldest = max(minSeq, s.retainedFrom(row.Head), 1)
	}
	h.log = &dbLog{s: s, branch: row.ID, incarnation: row.Incarnation, oldest: oldest, last: row.Head, frozen: new(atomic.Int32)}
	h.feed = store.NewFeed(&h.mu, h.log)
	h.feed.OnIdle(func() { // the last subscription closed: let the handle go if nothing else uses it
		s.mu.Lock()
		defer s.mu.Unlock()
		s.release(h)
	})
	return h
}

// retainedFrom is the oldest sequence the log keeps with head as its head.
func (s *Store) retainedFrom(head uint64) uint64 {
	r := uint64(s.cfg.EventRetention)
	if head < r {
		return 1
	}
	return head - r + 1
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
	idle := h.feed.Watchers() == 0 && h.observers.Len() == 0
	h.mu.RUnlock()
	if idle {
		delete(s.handles, h.id)
	}
}

// publish hands a committed commit to the branch's subscribers, if it has
// a handle (writer goroutine, after the commit).
func (s *Store) publish(id, incarnation uuid.UUID, c store.Commit) {
	s.mu.Lock()
	h := s.handles[id]
	s.mu.Unlock()
	if h == nil || h.incarnation != incarnation {
		return
	}
	last := c[len(c)-1].Sequence
	final := c[0].Kind == store.EventBranchDeleted
	h.mu.Lock()
	h.log.last = last
	h.log.oldest = max(h.log.oldest, s.retainedFrom(last))
	h.feed.Publish(c)
	if final {
		h.deleted = true
	}
	h.mu.Unlock()
	s.mu.Lock()
	if final && s.handles[id] == h {
		delete(s.handles, id)
	} else {
		s.release(h)
	}
	s.mu.Unlock()
}

// sweepBelow is the sequence below which a branch's events may be deleted
// after a write that brings its head to head: past the retention, and
// behind what its subscribers were told is retained (writer goroutine).
// Nothing, while a pin earlier in the batch is making the branch's handle:
// the pin read the oldest event before this write, and the handle it makes
// says that event is there from the pin's after until this write's, for
// any subscriber that joins it meanwhile; the next write trims.
func (s *Store) sweepBelow(id, incarnation uuid.UUID, head uint64) uint64 {
	if s.pinning[id] > 0 {
		return 0
	}
	below := s.retainedFrom(head)
	s.mu.Lock()
	h := s.handles[id]
	s.mu.Unlock()
	if h != nil && h.incarnation == incarnation {
		h.mu.RLock()
		below = min(below, h.log.oldest)
		h.mu.RUnlock()
	}
	return below
}
