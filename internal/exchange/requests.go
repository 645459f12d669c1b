package exchange

import (
	"container/list"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// requestMemory remembers Send request ids per sender (DESIGN.md "Branches", the idempotency rule:
// per sender for the Exchange, 10 minutes or the last 10,000 requests). A sender's log outlives its
// registration, so the repeat check can come before any other check; it is made only for a
// registered sender, and dropped once the sender has not sent for longer than the TTL (by then
// every entry in it has expired).
type requestMemory struct {
	mu       sync.Mutex
	bySender map[uuid.UUID]*requestLog
	// idle holds the logs in order of last use, least recent first: a lookup moves its log to the
	// back, so the logs to drop are found at the front, at O(1) per lookup.
	idle list.List
}

func (r *requestMemory) init() { r.bySender = map[uuid.UUID]*requestLog{} }

// lookup returns sender's log, or nil; it neither creates nor touches one.
func (r *requestMemory) lookup(sender uuid.UUID) *requestLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bySender[sender]
}

// forSender returns sender's log, creating it when create is set (nil otherwise), marks it used at
// now, and drops the logs unused for longer than ttl.
func (r *requestMemory) forSender(sender uuid.UUID, now time.Time, ttl time.Duration, create bool) *requestLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	for e := r.idle.Front(); e != nil; e = r.idle.Front() {
		l := e.Value.(*requestLog)
		if now.Sub(l.touched) <= ttl {
			break
		}
		r.idle.Remove(e)
		delete(r.bySender, l.sender)
	}
	l := r.bySender[sender]
	switch {
	case l != nil:
		r.idle.MoveToBack(l.elem)
	case !create:
		return nil
	default:
		l = &requestLog{sender: sender, byID: map[string]*requestEntry{}}
		l.elem = r.idle.PushBack(l)
		r.bySender[sender] = l
	}
	l.touched = now // under r.mu, so the log just handed out is not dropped
	return l
}

// requestLog is one sender's remembered requests, oldest first.
type requestLog struct {
	sender  uuid.UUID
	elem    *list.Element // in requestMemory.idle
	touched time.Time     // the last lookup; guarded by requestMemory.mu

	mu   sync.Mutex // guards the rest; held across one idempotent Send
	byID map[string]*requestEntry
	fifo queue[*requestEntry]
}

type requestEntry struct {
	id  string
	at  time.Time
	msg *envelope.Message
}

// expire drops entries older than ttl from the front.
func (l *requestLog) expire(now time.Time, ttl time.Duration) {
	for l.fifo.len() > 0 && now.Sub(l.fifo.live()[0].at) > ttl {
		l.evictOldest()
	}
}

func (l *requestLog) evictOldest() {
	e, _ := l.fifo.popFront()
	if l.byID[e.id] == e {
		delete(l.byID, e.id)
	}
}

// get returns the message the first Send with id returned, if it is still remembered.
func (l *requestLog) get(id string, now time.Time, ttl time.Duration) (*envelope.Message, bool) {
	l.expire(now, ttl)
	e, ok := l.byID[id]
	if !ok {
		return nil, false
	}
	return e.msg, true
}

// put remembers id -> m, forgetting the oldest entries past limit.
func (l *requestLog) put(id string, m *envelope.Message, now time.Time, limit int) {
	e := &requestEntry{id: id, at: now, msg: m}
	l.byID[id] = e
	l.fifo.push(e)
	for l.fifo.len() > limit {
		l.evictOldest()
	}
}
