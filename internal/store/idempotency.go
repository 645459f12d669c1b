package store

import (
	"fmt"
	"time"
)

// Idempotency window (DESIGN.md "Branches"): a request id is remembered for
// DefaultRequestTTL or the last DefaultRequestMax requests of its scope,
// whichever ends first.
const (
	DefaultRequestTTL = 10 * time.Minute
	DefaultRequestMax = 10_000
)

// cachedRequest is one remembered request: the op that used the id and the
// result it returned.
type cachedRequest struct {
	id     string
	op     Op
	at     time.Time
	result any
}

// requestCache remembers request ids of one scope. It is guarded by the
// lock of its owner (the branch, or the store for the server-wide scope).
type requestCache struct {
	ttl   time.Duration
	max   int
	byID  map[string]*cachedRequest
	queue []*cachedRequest // oldest first, from head
	head  int
}

func newRequestCache(ttl time.Duration, max int) *requestCache {
	return &requestCache{ttl: ttl, max: max, byID: map[string]*cachedRequest{}}
}

// expire drops the entries older than the ttl, and the oldest beyond max.
func (c *requestCache) expire(now time.Time) {
	for c.head < len(c.queue) {
		e := c.queue[c.head]
		if len(c.byID) <= c.max && now.Sub(e.at) < c.ttl {
			break
		}
		if c.byID[e.id] == e {
			delete(c.byID, e.id)
		}
		c.queue[c.head] = nil
		c.head++
	}
	if c.head > 1024 && c.head*2 > len(c.queue) { // compact the consumed prefix
		c.queue = append([]*cachedRequest(nil), c.queue[c.head:]...)
		c.head = 0
	}
}

// get returns the result remembered for id. An id used by another op is
// ErrRequestIDReused.
func (c *requestCache) get(now time.Time, op Op, id string) (any, bool, error) {
	if c == nil || id == "" {
		return nil, false, nil
	}
	c.expire(now)
	e, ok := c.byID[id]
	if !ok {
		return nil, false, nil
	}
	if e.op != op {
		return nil, false, fieldErr("request_id", ErrRequestIDReused, "request_id %q was used by %s, not %s", id, e.op, op)
	}
	return e.result, true, nil
}

// put remembers the result of a successful request.
func (c *requestCache) put(now time.Time, op Op, id string, result any) {
	if id == "" {
		return
	}
	e := &cachedRequest{id: id, op: op, at: now, result: result}
	c.byID[id] = e
	c.queue = append(c.queue, e)
	c.expire(now)
}

// String is for debugging.
func (c *requestCache) String() string { return fmt.Sprintf("requestCache(%d)", len(c.byID)) }
