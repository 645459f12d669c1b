package exchange

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// sweepEvery is how many request-log lookups pass between sweeps of idle senders' logs: often
// enough that the memory of senders gone quiet is returned within a few thousand idempotent sends,
// rarely enough that the sweep's walk over every sender costs nothing per send.
const sweepEvery = 1024

// requestMemory remembers Send request ids per sender (DESIGN.md "Idempotency": per sender for the
// Exchange, 10 minutes or the last 10,000 requests). It outlives the sender's registration, so the
// repeat check can come before any other check.
type requestMemory struct {
	mu       sync.Mutex
	bySender map[uuid.UUID]*requestLog
	lookups  int
}

func (r *requestMemory) init() { r.bySender = map[uuid.UUID]*requestLog{} }

// forSender returns sender's log, creating it, and now and then drops the logs of senders idle
// longer than ttl (all their entries have expired).
func (r *requestMemory) forSender(sender uuid.UUID, now time.Time, ttl time.Duration) *requestLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if r.lookups%sweepEvery == 0 {
		for id, l := range r.bySender {
			if now.Sub(time.Unix(0, l.touched.Load())) > ttl {
				delete(r.bySender, id)
			}
		}
	}
	l := r.bySender[sender]
	if l == nil {
		l = &requestLog{byID: map[string]*requestEntry{}}
		r.bySender[sender] = l
	}
	l.touched.Store(now.UnixNano()) // under r.mu, so a sweep never drops a log just handed out
	return l
}

// requestLog is one sender's remembered requests, oldest first.
type requestLog struct {
	touched atomic.Int64 // UnixNano of the last lookup; read by sweeps
	mu      sync.Mutex   // guards the rest; held across one idempotent Send
	byID    map[string]*requestEntry
	fifo    []*requestEntry
	head    int
}

type requestEntry struct {
	id  string
	at  time.Time
	msg *envelope.Message
}

// expire drops entries older than ttl from the front.
func (l *requestLog) expire(now time.Time, ttl time.Duration) {
	for l.head < len(l.fifo) && now.Sub(l.fifo[l.head].at) > ttl {
		l.evictOldest()
	}
}

func (l *requestLog) evictOldest() {
	e := l.fifo[l.head]
	l.fifo[l.head] = nil
	l.head++
	if l.byID[e.id] == e {
		delete(l.byID, e.id)
	}
	if l.head == len(l.fifo) {
		l.fifo, l.head = l.fifo[:0], 0
	} else if l.head*2 > len(l.fifo) {
		n := copy(l.fifo, l.fifo[l.head:])
		clear(l.fifo[n:])
		l.fifo, l.head = l.fifo[:n], 0
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
	l.fifo = append(l.fifo, e)
	for len(l.fifo)-l.head > limit {
		l.evictOldest()
	}
}
