package exchange

import (
	"container/list"
	"crypto/sha256"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// requestMemory remembers Send request ids per sender (docs/design.md#branches, the idempotency rule:
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
	// nextSweep is when (UnixNano) the front of idle expires, MaxInt64 with none: sweep skips the
	// lock before then.
	nextSweep atomic.Int64
}

func (r *requestMemory) init() {
	r.bySender = map[uuid.UUID]*requestLog{}
	r.nextSweep.Store(math.MaxInt64)
}

// lookup returns sender's log, or nil; it neither creates nor touches one.
func (r *requestMemory) lookup(sender uuid.UUID) *requestLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bySender[sender]
}

// sweep drops the logs unused for longer than ttl, giving their bytes back to b (every entry in
// them has expired: none is older than its log's last use). Every Send calls it, with or without a
// request id, so expired records never hold the budget against a Send (review of issue 11); it
// takes the lock only once the least recently used log may have expired.
func (r *requestMemory) sweep(now time.Time, ttl time.Duration, b *budget) {
	if now.UnixNano() < r.nextSweep.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now, ttl, b)
}

// sweepLocked is sweep under r.mu; it sets nextSweep to when the front log expires.
func (r *requestMemory) sweepLocked(now time.Time, ttl time.Duration, b *budget) {
	for e := r.idle.Front(); e != nil; e = r.idle.Front() {
		l := e.Value.(*requestLog)
		if now.Sub(l.touched) <= ttl {
			break
		}
		r.idle.Remove(e)
		delete(r.bySender, l.sender)
		b.release(l.bytes.Swap(0))
	}
	r.setNextSweep(ttl)
}

// setNextSweep records when the least recently used log expires (never, with none); under r.mu.
func (r *requestMemory) setNextSweep(ttl time.Duration) {
	next := int64(math.MaxInt64)
	if e := r.idle.Front(); e != nil {
		next = e.Value.(*requestLog).touched.Add(ttl).UnixNano()
	}
	r.nextSweep.Store(next)
}

// forSender returns sender's log, creating it when create is set (nil otherwise), marks it used at
// now, and drops the logs unused for longer than ttl (sweep).
func (r *requestMemory) forSender(sender uuid.UUID, now time.Time, ttl time.Duration, create bool, b *budget) *requestLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now, ttl, b)
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
	r.setNextSweep(ttl)
	return l
}

// requestLog is one sender's remembered requests, oldest first.
type requestLog struct {
	sender  uuid.UUID
	elem    *list.Element // in requestMemory.idle
	touched time.Time     // the last lookup; guarded by requestMemory.mu
	// bytes is what the log's records are charged to the budget; read when an idle log is dropped
	// (under requestMemory.mu, not mu), so atomic.
	bytes atomic.Int64

	mu   sync.Mutex // guards the rest; held across one idempotent Send
	byID map[string]*requestEntry
	fifo queue[*requestEntry]
}

// requestEntry is what a repeat needs of the first Send (issue 11: keep what a repeat needs, not
// the message body): the message's identity and routing, a digest of the whole message to rebuild
// it from a repeat that carries the same payload, and a weak pointer that answers the message
// itself while anything still holds it (an outbox, an inbox, a dead letter).
type requestEntry struct {
	id  string
	at  time.Time
	ref weak.Pointer[envelope.Message]
	// msgID and createdAt are the first message's identity; recipient and channel its routing.
	msgID     uuid.UUID
	createdAt float64
	recipient envelope.Participant
	channel   *string
	sender    uuid.UUID
	digest    [sha256.Size]byte
	size      int64 // charged to the budget
}

// recordBytes is what remembering the request id of m costs the budget.
func recordBytes(id string, m *envelope.Message) int64 {
	n := int64(requestRecordOverhead + len(id) + len(m.Recipient.String()))
	if m.Channel != nil {
		n += int64(len(*m.Channel))
	}
	return n
}

// messageDigest is the SHA-256 of m's JSON: two messages with the same digest are the same
// message, field for field.
func messageDigest(m *envelope.Message) ([sha256.Size]byte, bool) {
	b, err := m.MarshalJSON()
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256(b), true
}

// answer is the message a repeat of this request returns: the first message while anything holds
// it; else the message req would have built with the first one's identity, when that is the first
// message exactly (a retry of the same request, the usual case); else the first message's identity
// and routing without its content (a repeat with another payload, after the message was consumed).
func (e *requestEntry) answer(req *SendRequest) *envelope.Message {
	return e.record().Answer(e.ref.Value(), req)
}

func (e *requestEntry) record() RequestRecord {
	return RequestRecord{MsgID: e.msgID, CreatedAt: e.createdAt, Sender: e.sender, Recipient: e.recipient, Channel: e.channel, Digest: e.digest}
}

// RequestRecord is what a repeat of a Send needs of the first one (issue 11: its identity and
// routing and a digest, not the body). The memory engine keeps it per request id; the database
// engines store it in a row and answer a repeat with Answer, so the rule is written once.
type RequestRecord struct {
	MsgID     uuid.UUID
	CreatedAt float64
	Sender    uuid.UUID
	Recipient envelope.Participant
	Channel   *string
	// Digest is the SHA-256 of the first message's JSON.
	Digest [sha256.Size]byte
}

// NewRequestRecord is the record of a Send that returned m.
func NewRequestRecord(sender uuid.UUID, m *envelope.Message) RequestRecord {
	r := RequestRecord{MsgID: m.ID, CreatedAt: m.CreatedAt, Sender: sender, Recipient: m.Recipient, Channel: m.Channel}
	r.Digest, _ = messageDigest(m)
	return r
}

// Answer is the message a repeat returns: held (the first message) while anything holds it;
// else the message req would have built with the first one's identity, when that is the first
// message exactly (a retry of the same request, the usual case); else the first message's identity
// and routing without its content (a repeat with another payload, after the message was consumed).
func (r RequestRecord) Answer(held *envelope.Message, req *SendRequest) *envelope.Message {
	if held != nil {
		return held
	}
	if req != nil {
		if m, err := buildBaseMessage(*req); err == nil {
			m.ID, m.CreatedAt = r.MsgID, r.CreatedAt
			if d, ok := messageDigest(m); ok && d == r.Digest {
				return m
			}
		}
	}
	m, err := buildBaseMessage(SendRequest{Sender: r.Sender, Recipient: r.Recipient, Channel: r.Channel})
	if err != nil {
		return nil // cannot happen: a recipient and a channel that built a message before build it again
	}
	m.ID, m.CreatedAt = r.MsgID, r.CreatedAt
	return m
}

// expire drops entries older than ttl from the front and returns the bytes freed.
func (l *requestLog) expire(now time.Time, ttl time.Duration) (freed int64) {
	for l.fifo.len() > 0 && now.Sub(l.fifo.live()[0].at) > ttl {
		freed += l.evictOldest()
	}
	return freed
}

func (l *requestLog) evictOldest() int64 {
	e, _ := l.fifo.popFront()
	if l.byID[e.id] == e {
		delete(l.byID, e.id)
	}
	l.bytes.Add(-e.size)
	return e.size
}

// find returns the entry of id while it is remembered. It drops nothing, so a caller that found
// the log without marking it used (Remembered) never frees bytes twice with a concurrent drop.
func (l *requestLog) find(id string, now time.Time, ttl time.Duration) *requestEntry {
	e := l.byID[id]
	if e == nil || now.Sub(e.at) > ttl {
		return nil
	}
	return e
}

// put remembers id -> m with a record of size bytes (charged by the caller), forgetting the oldest
// entries past limit; it returns the bytes forgotten.
func (l *requestLog) put(id string, m *envelope.Message, size int64, now time.Time, limit int) (freed int64) {
	e := &requestEntry{id: id, at: now, ref: weak.Make(m), msgID: m.ID, createdAt: m.CreatedAt,
		recipient: m.Recipient, channel: m.Channel, sender: l.sender, size: size}
	e.digest, _ = messageDigest(m)
	l.byID[id] = e
	l.fifo.push(e)
	l.bytes.Add(size)
	for l.fifo.len() > limit {
		freed += l.evictOldest()
	}
	return freed
}
