package store

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Memory is the in-memory Store: nothing to install, nothing survives a
// restart. Each branch has its own lock, so writers on different branches
// do not wait for each other; reads share the branch lock.
//
// Locks: mu (the branch map) and a branch lock are never held together,
// so a call that waits for one branch (a delete behind a long reader)
// never holds up the others; a branch's lock is taken after a lookup under
// mu, and the branch's deleted flag, read under its lock, tells a lookup
// that raced with a delete. The request cache's lock is a leaf, taken
// under either.
type Memory struct {
	opts   options
	budget budget

	// mu guards branches and ids.
	mu       sync.RWMutex
	branches map[uuid.UUID]*branch
	ids      []uuid.UUID // sorted, for ListBranches paging

	requests *requestCache // every idempotency scope; its own lock

	subsOpen atomic.Int64 // subscriptions not yet closed, for WithMaxSubscriptions

	// unlockedHook, when a test sets it, runs in ToChatMessages, ForkBranch
	// and ExportBranch once they have released the branch lock, before
	// their whole-branch work.
	unlockedHook func()
}

// unlocked marks the point where a whole-branch read has released the
// branch lock (for unlockedHook).
func (m *Memory) unlocked() {
	if m.unlockedHook != nil {
		m.unlockedHook()
	}
}

var _ Store = (*Memory)(nil)

// Option configures a Memory store.
type Option func(*options)

type options struct {
	budget     int64
	retention  int
	requestTTL time.Duration
	requestMax int
	subBuffer  int
	// subBufferBytes is the default bound of a subscription's buffer in
	// bytes (WithSubscriberBufferBytes; 0: Subscribe's default).
	subBufferBytes int64
	maxSubs        int
	now            func() time.Time
}

// WithMemoryBudget sets the bytes the store may hold (an estimate of its
// heap use); a write that would exceed it is refused with ErrMemoryBudget
// and changes nothing. The default is DefaultMemoryBudget; 0 means no
// limit.
func WithMemoryBudget(bytes int64) Option {
	return func(o *options) { o.budget = max(bytes, 0) }
}

// WithEventRetention sets how many events each branch's log keeps
// (default DefaultEventRetention; at least 1).
func WithEventRetention(n int) Option {
	return func(o *options) { o.retention = max(n, 1) }
}

// WithRequestWindow sets how long and how many request ids each scope
// remembers (default DefaultRequestTTL and DefaultRequestMax).
func WithRequestWindow(ttl time.Duration, maxRequests int) Option {
	return func(o *options) { o.requestTTL, o.requestMax = ttl, max(maxRequests, 1) }
}

// WithSubscriberBuffer sets the default number of commits a subscription
// buffers before it is ended as too slow (default DefaultSubscriberBuffer).
func WithSubscriberBuffer(n int) Option {
	return func(o *options) { o.subBuffer = max(n, 1) }
}

// WithSubscriberBufferBytes sets the default bytes of commits (by the heap
// estimate) a subscription buffers before it is ended as too slow (default
// DefaultSubscriberBufferBytes; n <= 0 means the default). A commit larger
// than it is still taken when the buffer is empty.
func WithSubscriberBufferBytes(n int64) Option {
	return func(o *options) { o.subBufferBytes = n } // n <= 0: Feed.Subscribe takes the default
}

// WithMaxSubscriptions sets how many subscriptions may be open at once
// (from Subscribe until Close, whether or not they have ended); past it
// Subscribe is ErrTooManySubscriptions. The default is
// DefaultMaxSubscriptions; 0 means no limit.
func WithMaxSubscriptions(n int) Option {
	return func(o *options) { o.maxSubs = max(n, 0) }
}

// WithClock sets the clock the idempotency window reads (tests move it).
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// NewMemory returns an empty in-memory store.
func NewMemory(opts ...Option) *Memory {
	o := options{
		budget:     DefaultMemoryBudget,
		retention:  DefaultEventRetention,
		requestTTL: DefaultRequestTTL,
		requestMax: DefaultRequestMax,
		subBuffer:  DefaultSubscriberBuffer,
		maxSubs:    DefaultMaxSubscriptions,
		now:        time.Now,
	}
	for _, opt := range opts {
		opt(&o)
	}
	m := &Memory{opts: o, branches: map[uuid.UUID]*branch{}}
	m.budget.limit = o.budget
	m.requests = newRequestCache(o, &m.budget)
	return m
}

// MemoryUsed returns the bytes the store holds by its estimate, the figure
// the memory budget limits.
func (m *Memory) MemoryUsed() int64 { return m.budget.used.Load() }

// lookup returns the branch with id, unlocked.
func (m *Memory) lookup(id uuid.UUID) (*branch, error) {
	m.mu.RLock()
	b := m.branches[id]
	m.mu.RUnlock()
	if b == nil {
		return nil, &BranchError{Err: ErrBranchNotFound, BranchID: id}
	}
	return b, nil
}

// writeLocked returns the branch with id, write-locked. A branch deleted
// between the lookup and the lock is not found.
func (m *Memory) writeLocked(id uuid.UUID) (*branch, error) {
	b, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.deleted {
		b.mu.Unlock()
		return nil, &BranchError{Err: ErrBranchNotFound, BranchID: id}
	}
	return b, nil
}

// readLocked returns the branch with id, read-locked.
func (m *Memory) readLocked(id uuid.UUID) (*branch, error) {
	b, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	b.mu.RLock()
	if b.deleted {
		b.mu.RUnlock()
		return nil, &BranchError{Err: ErrBranchNotFound, BranchID: id}
	}
	return b, nil
}

// insertID adds id to the sorted id list (m.mu held).
func (m *Memory) insertID(id uuid.UUID) {
	i, _ := slices.BinarySearchFunc(m.ids, id, compareIDs)
	m.ids = slices.Insert(m.ids, i, id)
}

// removeID removes id from the sorted id list (m.mu held).
func (m *Memory) removeID(id uuid.UUID) {
	if i, found := slices.BinarySearchFunc(m.ids, id, compareIDs); found {
		m.ids = slices.Delete(m.ids, i, i+1)
	}
}

func compareIDs(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }

// Recall returns a remembered result (Store.Recall). It takes no branch
// lock: a branch's scope is its incarnation, which never changes.
func (m *Memory) Recall(_ context.Context, principal string, branchID *uuid.UUID, op Op, requestID string) (any, bool, error) {
	if requestID == "" {
		return nil, false, nil
	}
	scope := creatorScope(principal)
	switch {
	case op == OpDeleteBranch:
		if branchID == nil {
			return nil, false, nil
		}
		scope = deleteScope(*branchID)
	case branchID != nil:
		b, err := m.lookup(*branchID)
		if err != nil {
			// An unknown branch remembers nothing; the call itself reports it.
			return nil, false, nil
		}
		scope = branchScope(b)
	}
	return m.requests.get(m.opts.now(), scope, op, requestID)
}

// recallCreated returns a remembered result of a principal's
// branch-creating calls, marked as replayed.
func (m *Memory) recallCreated(principal string, op Op, requestID string) (BranchResult, bool, error) {
	r, ok, err := m.requests.get(m.opts.now(), creatorScope(principal), op, requestID)
	if err != nil || !ok {
		return BranchResult{}, false, err
	}
	res := r.(BranchResult)
	res.Replayed = true
	return res, true, nil
}
