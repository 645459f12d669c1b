package exchange

import (
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// SendRequest is what Send queues: LionAGI's send(sender, recipient, content, channel) plus an
// optional request id.
type SendRequest struct {
	// Sender is the registered owner whose outbox gets the message.
	Sender uuid.UUID
	// Recipient is the message's recipient: a UUID (delivered if it is a registered owner at
	// collect), None (broadcast), UNSET (the zero Participant; dropped at collect), or a role or
	// plain string (dropped at collect) (ADR-0006 D1 routing predicates, D5).
	Recipient envelope.Participant
	// Content is the message's content, any JSON value (ADR-0006 D1: base Message accepts
	// arbitrary content without coercion); the zero Value is null.
	Content jsonv.Value
	// Channel is optional grouping metadata; it does not affect delivery (ADR-0006 D1).
	Channel *string
	// RequestID, when not empty, makes Send idempotent (AIP-155; docs/design.md#branches, the
	// idempotency rule: per sender for the Exchange): a repeat from the same sender within the
	// request memory returns the first message and queues nothing, whatever the rest of the request
	// says. At most MaxRequestIDLength bytes.
	RequestID string
}

// Send builds a base Message from sender to recipient and queues it in the sender's outbox; the
// recipient need not be registered yet (ADR-0006 D5). A sender that is not registered is
// ErrOwnerNotRegistered; a full outbox is ErrOutboxFull; content the envelope rejects is an
// envelope error wrapping envelope.ErrInvalid; after Close, ErrClosed. With a RequestID the repeat
// check comes first (docs/design.md#branches, the idempotency rule); only a successful Send is
// remembered, so a failed one may be retried with the same id. Request memory is kept only for
// registered senders: a sender that was never registered fails without leaving any.
func (x *Exchange) Send(req SendRequest) (*envelope.Message, error) {
	if err := CheckRequestID(req.RequestID); err != nil {
		return nil, err
	}
	now := x.opts.now()
	// Any Send frees the records that expired, so they never refuse it (review of issue 11).
	x.requests.sweep(now, x.opts.requestTTL, &x.budget)
	if req.RequestID == "" {
		return x.send(req)
	}
	log := x.requests.forSender(req.Sender, now, x.opts.requestTTL, false, &x.budget)
	if log == nil {
		// Nothing remembered for this sender, so no repeat to answer: a sender that is not
		// registered fails here, before any memory is made for it.
		if !x.isRegistered(req.Sender) {
			return nil, ownerErr("Sender", req.Sender, ErrOwnerNotRegistered)
		}
		log = x.requests.forSender(req.Sender, now, x.opts.requestTTL, true, &x.budget)
	}
	log.mu.Lock() // serialises this sender's idempotent sends, so a concurrent repeat waits for the first
	defer log.mu.Unlock()
	now = x.opts.now()
	x.budget.release(log.expire(now, x.opts.requestTTL))
	if e := log.byID[req.RequestID]; e != nil {
		return e.answer(&req), nil
	}
	var record int64
	m, err := x.sendWith(req, func(m *envelope.Message) int64 {
		record = recordBytes(req.RequestID, m)
		return record
	})
	if err != nil {
		return nil, err
	}
	// The record was charged with the message, so a full budget refuses the Send rather than
	// forget the id; the sender's own bound (the last N ids) is the only eviction within the TTL.
	x.budget.release(log.put(req.RequestID, m, record, now, x.opts.requestsPerSender))
	return m, nil
}

// CheckRequestID refuses a Send's request id that is longer than MaxRequestIDLength or holds
// U+0000 (ErrInvalidRequestID), on every engine: the database engines keep it in a text column,
// which PostgreSQL's TEXT cannot hold NUL in (docs/decisions/0012 row 24). A caller that asks
// Remembered first checks it before, as no such id can be remembered.
func CheckRequestID(id string) error {
	if len(id) > MaxRequestIDLength {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidRequestID, len(id), MaxRequestIDLength)
	}
	if strings.IndexByte(id, 0) >= 0 {
		return fmt.Errorf("%w: must not contain U+0000 (NUL)", ErrInvalidRequestID)
	}
	return nil
}

func (x *Exchange) send(req SendRequest) (*envelope.Message, error) { return x.sendWith(req, nil) }

// sendWith queues req's message, charging the budget with its bytes plus extra(m) when extra is
// not nil (the request record of an idempotent Send), all or nothing.
func (x *Exchange) sendWith(req SendRequest, extra func(*envelope.Message) int64) (*envelope.Message, error) {
	if x.closed.Load() {
		return nil, ErrClosed
	}
	f := x.lookup(req.Sender)
	if f == nil {
		return nil, ownerErr("Sender", req.Sender, ErrOwnerNotRegistered)
	}
	m, err := newBaseMessage(req)
	if err != nil {
		return nil, err
	}
	size := entrySize(m)
	charge := size
	if extra != nil {
		charge += extra(m)
	}
	known := false
	if id, ok := req.Recipient.ID(); ok {
		known = x.isRegistered(id)
	}

	f.mu.Lock()
	if f.closed { // unregistered since the lookup
		f.mu.Unlock()
		return nil, ownerErr("Sender", req.Sender, ErrOwnerNotRegistered)
	}
	outbox := f.outbox()
	if n := outbox.len(); x.opts.maxOutbox > 0 && n >= x.opts.maxOutbox {
		f.mu.Unlock()
		return nil, ownerErr("Sender", req.Sender, &OutboxFullError{Queued: n, Limit: x.opts.maxOutbox})
	}
	if err := x.budget.reserve(charge); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	f.push(outbox, newEntry(m, size, known))
	f.mu.Unlock()
	// Only the first Send since the collector's last pass took this owner tells the collector,
	// after the flow's lock is released (background.go).
	if x.bg != nil && f.dirty.CompareAndSwap(false, true) {
		x.bg.note(f)
	}
	return m, nil
}

// NewMessage is the base Message Send queues for req (newBaseMessage), for the database engines.
func NewMessage(req SendRequest) (*envelope.Message, error) { return newBaseMessage(req) }

// newBaseMessage is LionAGI's Message(sender=..., recipient=..., content=..., channel=...) built
// through the envelope's constructor, so it obeys exactly the rules a LionAGI dict does.
//
// A recipient or channel holding U+0000 is refused (an envelope.FieldError naming it), on every
// engine: the database engines keep both outside the message's JSON too (a dead letter's
// recipient, a request record), in text columns PostgreSQL cannot store NUL in, and a message
// queued that its collect could not record would block the sender's outbox
// (docs/decisions/0012 row 24). Such a recipient could never be routed anyway: it is neither a
// UUID nor a role.
func newBaseMessage(req SendRequest) (*envelope.Message, error) {
	if err := envelope.CheckNoNUL("recipient", req.Recipient.String()); err != nil {
		return nil, err
	}
	if req.Channel != nil {
		if err := envelope.CheckNoNUL("channel", *req.Channel); err != nil {
			return nil, err
		}
	}
	return buildBaseMessage(req)
}

// buildBaseMessage is newBaseMessage without its checks of what a new Send may hold: a request
// record's answer (RequestRecord.Answer) rebuilds the message an earlier Send made, which an
// earlier version let hold U+0000.
func buildBaseMessage(req SendRequest) (*envelope.Message, error) {
	fields := []jsonv.Member{
		{Key: "sender", Value: envelope.IDParticipant(req.Sender).JSON()},
		{Key: "recipient", Value: req.Recipient.JSON()},
		{Key: "content", Value: req.Content},
	}
	if req.Channel != nil {
		fields = append(fields, jsonv.Member{Key: "channel", Value: jsonv.StringValue(*req.Channel)})
	}
	return envelope.New(envelope.KindGeneric, jsonv.ObjectValue(fields...))
}

// Remembered returns the message that a Send by sender with requestID returned, while the request
// is remembered. A caller that must check for a repeat before validating the rest of a request
// (docs/design.md#branches, the idempotency rule: the repeat check comes before any other check) asks
// here first; Send checks again, so a repeat is never queued twice.
//
// req is the repeat as far as the caller could read it (nil if not at all): the answer is the
// first message while anything holds it, else rebuilt from req when req builds exactly the first
// message, else the first message's identity and routing without its content (requestEntry.answer).
func (x *Exchange) Remembered(sender uuid.UUID, requestID string, req *SendRequest) (*envelope.Message, bool) {
	if requestID == "" {
		return nil, false
	}
	l := x.requests.lookup(sender)
	if l == nil {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.find(requestID, x.opts.now(), x.opts.requestTTL)
	if e == nil {
		return nil, false
	}
	return e.answer(req), true
}
