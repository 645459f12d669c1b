package exchange

import (
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Reason says why Collect dropped a message for one recipient. ADR-0006 D5 consumes such messages
// silently; historyd keeps them as dead letters of the sender (docs/design.md#exchange).
type Reason uint8

// The drop reasons.
const (
	// ReasonUnsetRecipient: the message was sent with no recipient, which stays MessageRole.UNSET
	// (ADR-0006 D1: UNSET is direct but undeliverable).
	ReasonUnsetRecipient Reason = iota + 1
	// ReasonUnknownRecipient: the recipient is a UUID that is not a registered owner and was not
	// one when the message was sent.
	ReasonUnknownRecipient
	// ReasonNotUUID: the recipient is a plain string or a role other than unset, so it can never
	// be an owner (ADR-0006 D5: "a plain string ... is consumed and dropped").
	ReasonNotUUID
	// ReasonRecipientLeft: the recipient was registered (when the message was sent, or when the
	// broadcast's owner snapshot was taken) and unregistered before delivery (ADR-0006 D5: "a
	// recipient that unregisters before delivery receives nothing").
	ReasonRecipientLeft
	// ReasonInboxFull: the recipient's inbox for this sender held the configured maximum
	// (WithMaxInbox).
	ReasonInboxFull
	// ReasonNoRecipients: a broadcast found no other registered owner (vector "broadcast": a solo
	// owner's broadcast delivers 0).
	ReasonNoRecipients
)

var reasonNames = map[Reason]string{
	ReasonUnsetRecipient:   "unset recipient",
	ReasonUnknownRecipient: "unknown recipient",
	ReasonNotUUID:          "not a UUID",
	ReasonRecipientLeft:    "recipient left",
	ReasonInboxFull:        "inbox full",
	ReasonNoRecipients:     "no recipients",
}

// String returns the reason in words, for example "inbox full".
func (r Reason) String() string {
	if s, ok := reasonNames[r]; ok {
		return s
	}
	return "unknown reason"
}

// Reasons lists every drop reason, in their numeric order.
func Reasons() []Reason {
	return []Reason{ReasonUnsetRecipient, ReasonUnknownRecipient, ReasonNotUUID, ReasonRecipientLeft,
		ReasonInboxFull, ReasonNoRecipients}
}

// DeadLetter is a message that Collect dropped for one recipient, kept by its sender.
type DeadLetter struct {
	// Seq numbers the owner's dead letters from 1 in the order they were kept; it is the cursor of
	// DeadLetters.
	Seq uint64
	// Message is the dropped message, as it was sent.
	Message *envelope.Message
	// Recipient is who it was for: the message's recipient for a direct message (UNSET, a plain
	// string, a UUID), the owner it failed to reach for a broadcast, None for a broadcast that
	// found no recipient.
	Recipient envelope.Participant
	// Reason says why it was dropped.
	Reason Reason
	// At is when it was dropped.
	At time.Time
	// Attempts is the number of leases the message had, for ReasonMaxAttempts; 0 otherwise.
	Attempts int
	// size is the message's budget bytes (budget.go).
	size int64
}

// deadLetters is one owner's bounded FIFO of dead letters.
type deadLetters struct {
	q       queue[DeadLetter]
	next    uint64 // Seq of the last letter kept
	evicted uint64 // letters dropped by the bound
}

func (d *deadLetters) len() int { return d.q.len() }

// add keeps dl, evicting the oldest letters past limit (at least 1; counted, never silent), and
// returns the budget bytes of the letters it evicted.
func (d *deadLetters) add(dl DeadLetter, limit int) (freed int64) {
	d.next++
	dl.Seq = d.next
	for d.q.len() >= max(limit, 1) {
		old, _ := d.q.popFront()
		freed += old.size
		d.evicted++
	}
	d.q.push(dl)
	return freed
}

// after returns up to limit letters with Seq > after, oldest first (limit <= 0: all), and whether
// more follow.
func (d *deadLetters) after(after uint64, limit int) ([]DeadLetter, bool) {
	live := d.q.live()
	i, _ := slices.BinarySearchFunc(live, after+1, func(dl DeadLetter, seq uint64) int { return cmpUint(dl.Seq, seq) })
	rest := live[i:]
	if limit > 0 && len(rest) > limit {
		return slices.Clone(rest[:limit]), true
	}
	return slices.Clone(rest), false
}

// DeadLetterPage is one page of an owner's dead letters.
type DeadLetterPage struct {
	// Letters are the dead letters, oldest first.
	Letters []DeadLetter
	// More is set when letters follow the last one returned; pass its Seq as after.
	More bool
	// Evicted counts the owner's dead letters dropped by the bound since it registered.
	Evicted uint64
}

// DeadLetters returns up to limit of owner's dead letters with Seq > after, oldest first
// (limit <= 0: all). An owner that is not registered has none, as Receive answers empty for it
// (ADR-0006 D5); Unregister returns what an owner held.
func (x *Exchange) DeadLetters(owner uuid.UUID, after uint64, limit int) DeadLetterPage {
	f := x.lookup(owner)
	if f == nil {
		return DeadLetterPage{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return DeadLetterPage{}
	}
	x.expireLeases(f)
	letters, more := f.dead.after(after, limit)
	return DeadLetterPage{Letters: letters, More: more, Evicted: f.dead.evicted}
}
