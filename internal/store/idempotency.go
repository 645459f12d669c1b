package store

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// Idempotency window (DESIGN.md "Branches"): a request id is remembered for
// DefaultRequestTTL or the last DefaultRequestMax requests of its scope,
// whichever ends first.
const (
	DefaultRequestTTL = 10 * time.Minute
	DefaultRequestMax = 10_000
)

// DefaultRequestCap is how many request ids the memory backend remembers
// in all scopes together; past it the oldest are forgotten first. Every
// branch is a scope of its own, so without a store-wide cap a client that
// writes to many branches could make the store remember without bound.
// Remembered responses are charged to the memory budget (see
// requestOverhead), so the cap bounds their number, not their bytes: at
// 100,000 the bookkeeping alone is some 50 MB, 5% of the default budget.
const DefaultRequestCap = 100_000

// requestOverhead is the budget charge of one remembered request beyond
// the messages it keeps and its id: the entry, its map slot, its two queue
// slots and the boxed result.
const requestOverhead = 512

// requestScope names an idempotency scope (DESIGN.md "Branches"): the
// writes of one branch incarnation, the deletes of one branch id, or, both
// zero, the server-wide scope of the calls that create a branch. An
// incarnation is made with the branch, so a branch deleted and created
// again under its id starts with nothing remembered.
type requestScope struct {
	incarnation uuid.UUID
	deleteOf    uuid.UUID
}

// serverScope is the scope of CreateBranch, ImportBranch and ForkBranch.
var serverScope requestScope

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
	charge   int64 // requestOverhead, the id and what result holds beyond versions
	gone     bool  // forgotten; still in the queues until they pass it
}

// requestQueue is a queue of entries, oldest first, from head; gone
// entries are skipped when they reach the front.
type requestQueue struct {
	items []*cachedRequest
	head  int
	live  int
}

func (q *requestQueue) push(e *cachedRequest) {
	q.items = append(q.items, e)
	q.live++
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

// compact drops the consumed prefix once it is most of the queue.
func (q *requestQueue) compact() {
	if q.head > 1024 && q.head*2 > len(q.items) {
		q.items = append([]*cachedRequest(nil), q.items[q.head:]...)
		q.head = 0
	}
}

// requestCache remembers the request ids of every scope of a Memory store.
// Its lock is a leaf: it is taken under the store lock or a branch lock
// and takes no other, so the repeat check and the write it guards stay
// atomic under the lock that orders that scope's writes.
type requestCache struct {
	mu     sync.Mutex
	ttl    time.Duration
	max    int // per scope
	cap    int // all scopes
	budget *budget
	byKey  map[requestKey]*cachedRequest
	all    requestQueue                   // every entry, oldest first
	scopes map[requestScope]*requestQueue // each scope's entries, oldest first
}

func newRequestCache(o options, bud *budget) *requestCache {
	return &requestCache{
		ttl: o.requestTTL, max: o.requestMax, cap: o.requestCap, budget: bud,
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

// put remembers the response of a successful request, holding its
// versions and charging the rest. The write has been made, so the charge
// is never refused; the budget counts it, and later writes meet it.
func (c *requestCache) put(now time.Time, scope requestScope, op Op, id string, r response) {
	if id == "" {
		return
	}
	e := &cachedRequest{key: requestKey{scope, id}, op: op, at: now, result: r.result, versions: r.versions,
		charge: requestOverhead + int64(len(id)) + r.extra}
	for _, v := range e.versions {
		v.refs.Add(1)
	}
	c.budget.used.Add(e.charge)

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
	q.compact()
	c.expire(now)
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

// expire forgets the entries older than the ttl, and the oldest beyond
// the store-wide cap (c.mu held).
func (c *requestCache) expire(now time.Time) {
	for {
		e := c.all.front()
		if e == nil || len(c.byKey) <= c.cap && now.Sub(e.at) < c.ttl {
			break
		}
		c.forget(e)
	}
	c.all.compact()
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
