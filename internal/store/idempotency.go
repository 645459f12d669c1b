package store

import (
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Idempotency window (docs/design.md#branches): a request id is remembered for
// DefaultRequestTTL or the last DefaultRequestMax requests of its scope,
// whichever ends first.
const (
	DefaultRequestTTL = 10 * time.Minute
	DefaultRequestMax = 10_000
)

// requestOverhead is the budget charge of one remembered request beyond
// its id, its principal and what its result holds beyond the messages it
// keeps: the entry, its map slot, its two queue slots and the boxed
// result. BenchmarkHeapPerRequest measures 381 bytes of heap for an
// AddMessage's record with a 9-byte id (ADR-0010), charged 521: the charge
// is on the safe side.
const requestOverhead = 512

// requestScope names an idempotency scope (docs/design.md#branches, ADR-0010):
// the writes of one branch incarnation, the deletes of one branch id, or,
// both zero, the calls that create a branch (create, import, fork) made
// by one principal (the caller's token; "" on a server without auth). An
// incarnation is made with the branch, so a branch deleted and created
// again under its id starts with nothing remembered; creating it also
// forgets the deletes of its id, so the new branch's deletes start afresh.
type requestScope struct {
	incarnation uuid.UUID
	deleteOf    uuid.UUID
	principal   string
}

// creatorScope is the scope of a principal's CreateBranch, ImportBranch
// and ForkBranch.
func creatorScope(principal string) requestScope { return requestScope{principal: principal} }

func branchScope(b *branch) requestScope    { return requestScope{incarnation: b.incarnation} }
func deleteScope(id uuid.UUID) requestScope { return requestScope{deleteOf: id} }

type requestKey struct {
	scope requestScope
	id    string
}

// cachedRequest is one remembered request: the op that used the id and the
// response it returned, compacted to what a response carries (compact*).
type cachedRequest struct {
	key    requestKey
	op     Op
	at     time.Time
	result any
	// versions are the messages result carries. The entry holds a
	// reference on each, so the budget keeps counting them after the
	// branch lets them go (a clear, a replacement, the log's eviction, a
	// delete).
	versions []*version
	charge   int64 // requestOverhead, the id, the principal and what result holds beyond versions
	gone     bool  // forgotten; still in the queues until they pass it
}

// requestQueue is a queue of entries, oldest first, from head; gone
// entries are skipped when they reach the front, and swept out once they
// are most of the queue, so a queue holds at most about twice its live
// entries whatever order they are forgotten in.
type requestQueue struct {
	items []*cachedRequest
	head  int
	live  int
}

func (q *requestQueue) push(e *cachedRequest) {
	q.items = append(q.items, e)
	q.live++
	if n := len(q.items); n > 64 && (n-q.head > 2*q.live || 2*q.head > n) {
		q.sweep()
	}
}

// front returns the oldest entry not forgotten, nil when there is none.
func (q *requestQueue) front() *cachedRequest {
	for q.head < len(q.items) {
		if e := q.items[q.head]; !e.gone {
			return e
		}
		q.items[q.head] = nil
		q.head++
	}
	q.items, q.head = q.items[:0], 0
	return nil
}

// sweep drops the consumed prefix and the forgotten entries into a new,
// smaller array; a sweep follows at least as many forgets or front
// advances as it keeps entries, so its cost is O(1) per forget.
func (q *requestQueue) sweep() {
	kept := make([]*cachedRequest, 0, q.live+q.live/2)
	for _, e := range q.items[q.head:] {
		if !e.gone {
			kept = append(kept, e)
		}
	}
	q.items, q.head = kept, 0
}

// requestCache remembers the request ids of every scope of a Memory store.
// Scopes are isolated (ADR-0010): an id is forgotten when it is older than
// the ttl, when its scope has remembered max newer ones, or when its scope
// goes (a deleted branch's writes), never because of another scope's
// traffic. What bounds the whole is the memory budget, which every record
// is charged to: a record that does not fit refuses its write.
//
// Its lock is a leaf: it is taken under the store lock or a branch lock
// and takes no other, so the repeat check and the write it guards stay
// atomic under the lock that orders that scope's writes.
type requestCache struct {
	mu     sync.Mutex
	ttl    time.Duration
	max    int // per scope
	budget *budget
	byKey  map[requestKey]*cachedRequest
	all    requestQueue                   // every entry, oldest first: the ttl's order
	scopes map[requestScope]*requestQueue // each scope's entries, oldest first
}

func newRequestCache(o options, bud *budget) *requestCache {
	return &requestCache{
		ttl: o.requestTTL, max: o.requestMax, budget: bud,
		byKey: map[requestKey]*cachedRequest{}, scopes: map[requestScope]*requestQueue{},
	}
}

// get returns the result remembered for id in scope. An id used by another
// op is ErrRequestIDReused. It first forgets what has expired, in every
// scope.
func (c *requestCache) get(now time.Time, scope requestScope, op Op, id string) (any, bool, error) {
	if id == "" {
		return nil, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(now)
	e, ok := c.byKey[requestKey{scope, id}]
	if !ok {
		return nil, false, nil
	}
	if e.op != op {
		return nil, false, fieldErr("request_id", ErrRequestIDReused, "request_id %q was used by %s, not %s", id, e.op, op)
	}
	return e.result, true, nil
}

// response is what the cache keeps of a successful request: the result to
// return to a repeat, the versions behind the messages it carries, and
// the bytes it holds beyond them.
type response struct {
	result   any
	versions []*version
	extra    int64
}

// recordCharge is what remembering id in scope with extra bytes beyond
// its versions is charged (0 without an id: nothing is remembered).
func recordCharge(scope requestScope, id string, extra int64) int64 {
	if id == "" {
		return 0
	}
	return requestOverhead + int64(len(id)+len(scope.principal)) + extra
}

// reserve charges the budget for the record of a write about to be made,
// before it is made: a record that does not fit refuses the write with a
// *BudgetError, as a message that does not fit does, so a full budget
// never makes the store forget a live id early. The caller gives the
// charge back with release when the write fails, or hands it to put.
func (c *requestCache) reserve(scope requestScope, id string, extra int64) (int64, error) {
	n := recordCharge(scope, id, extra)
	if n == 0 {
		return 0, nil
	}
	if err := c.budget.reserve(n); err != nil {
		return 0, err
	}
	return n, nil
}

// release gives back a reservation whose write failed.
func (c *requestCache) release(charge int64) { c.budget.release(charge) }

// put remembers the response of a successful request, holding its
// versions; charge is what reserve charged for it. The oldest id of the
// scope is forgotten past the per-scope bound, and every id past the ttl.
func (c *requestCache) put(now time.Time, scope requestScope, op Op, id string, r response, charge int64) {
	if id == "" {
		return
	}
	e := &cachedRequest{key: requestKey{scope, id}, op: op, at: now, result: r.result, versions: r.versions, charge: charge}
	for _, v := range e.versions {
		v.refs.Add(1)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byKey[e.key]; ok {
		c.forget(old)
	}
	c.byKey[e.key] = e
	c.all.push(e)
	q := c.scopes[scope]
	if q == nil {
		q = &requestQueue{}
		c.scopes[scope] = q
	}
	q.push(e)
	if q.live > c.max {
		c.forget(q.front())
	}
	c.expire(now)
}

// putFreeing remembers the response of a write that gives back more than
// its record costs (a delete: the branch's own charge alone exceeds it),
// so its charge is taken without asking the budget: a full budget must
// not refuse the call that empties it.
func (c *requestCache) putFreeing(now time.Time, scope requestScope, op Op, id string, r response) {
	charge := recordCharge(scope, id, r.extra)
	if charge == 0 {
		return
	}
	c.budget.used.Add(charge)
	c.put(now, scope, op, id, r, charge)
}

// forgetScope forgets every id of a scope (a deleted branch's writes).
func (c *requestCache) forgetScope(scope requestScope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.scopes[scope]
	if q == nil {
		return
	}
	for _, e := range q.items[q.head:] {
		if !e.gone {
			c.forget(e)
		}
	}
}

// expire forgets the entries older than the ttl, in every scope (c.mu
// held). It is the only eviction across scopes, and it never forgets an
// id within the window.
func (c *requestCache) expire(now time.Time) {
	for {
		e := c.all.front()
		if e == nil || now.Sub(e.at) < c.ttl {
			break
		}
		c.forget(e)
	}
}

// forget drops one entry: its versions and charge go back (c.mu held).
func (c *requestCache) forget(e *cachedRequest) {
	e.gone = true
	if c.byKey[e.key] == e {
		delete(c.byKey, e.key)
	}
	c.all.live--
	if q := c.scopes[e.key.scope]; q != nil {
		if q.live--; q.live == 0 {
			delete(c.scopes, e.key.scope)
		}
	}
	for _, v := range e.versions {
		c.budget.unref(v)
	}
	c.budget.release(e.charge)
	e.result, e.versions = nil, nil
}

// branchResponse is what the cache keeps of a branch-creating call's
// result: the branch and its system, the one message a response carries
// (CreateBranchResponse.system), so that a remembered create, import or
// fork does not keep a whole branch alive after its delete; it holds the
// system's version and charges the branch metadata it keeps.
func branchResponse(res BranchResult, system *version) response {
	kept := BranchResult{Branch: res.Branch}
	var vs []*version
	if system != nil {
		kept.Messages = []StoredMessage{system.stored()}
		vs = []*version{system}
	}
	return response{result: kept, versions: vs, extra: valueSize(res.Branch.Metadata)}
}

// FirstIfRaced is a branch-creating call's refusal err, unless it is
// ErrBranchExists and recall finds the request's first result: a retry
// racing its first attempt (a hedged or timed-out call) checks the id after
// that attempt committed but recalled the request before, and the branch
// that exists is the first attempt's, so the retry gets its result, as it
// would have a moment later (storetest's RetryRacingFirstAttempt). Every
// engine recalls the request, then checks the id, in two steps.
func FirstIfRaced(err error, requestID string, recall func() (BranchResult, bool, error)) (BranchResult, error) {
	if requestID != "" && errors.Is(err, ErrBranchExists) {
		if r, ok, rerr := recall(); rerr == nil && ok {
			return r, nil
		}
	}
	return BranchResult{}, err
}
