package exchange

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Acknowledged delivery beside LionAGI's pop (issue 18; docs/decisions/0020-leases.md). The rules,
// which every engine follows and exchangetest's Lease* cases check:
//
//   - Visibility. A message in an inbox is visible unless a lease holds it or a Nack's delay hides
//     it. Lease takes visible messages only, in Receive's order (inbox creation order, oldest
//     first); PopMessage takes the oldest visible message of its inbox and never a hidden one.
//     Receive (a peek) shows every message, with its LeaseInfo when it has one.
//   - A lease. Lease increments the message's attempts, sets its deadline (now + the visibility
//     timeout) and hands out a Receipt naming (message, sender, attempt). The lease is held until
//     Ack, Nack, or someone else taking the message: its deadline passing makes the message
//     visible again but does not end the lease by itself, so a late Ack still works as long as
//     no one has leased, popped or dead-lettered the message since (a receipt is stale only once
//     its message moved on: ErrLeaseStale, nothing changes).
//   - Ack removes the message (the ledger's LedgerAcked). Nack ends the lease and hides the
//     message for its delay (0: visible at once); its attempt counts. ExtendLease sets the
//     deadline to now + its duration.
//   - Max attempts. A message whose lease ends, by Nack or by its deadline passing, with attempts
//     >= the owner's MaxAttempts becomes a dead letter of the owner (the recipient, unlike
//     Collect's drops, which are the sender's) with ReasonMaxAttempts and its attempt count. An
//     expired lease is noticed by the next call that looks at the owner's inboxes (Lease,
//     PopIf, ReceivePage, Get, DeadLetters, UnregisterIf), before it answers: no timer is needed
//     for the rule to be observable.
//   - Leased messages stay in their inbox: the inbox bound counts them, an inbox of a departed
//     sender is not reclaimed while it holds one, and UnregisterIf returns them with the rest of
//     the flow, ending their leases (a later Ack is ErrOwnerNotRegistered).
//   - Owner settings. MaxAttempts and Visibility are set at Register (OwnerSettings); zero means
//     the Exchange's defaults (WithLeaseDefaults).
//   - Time is the engine's clock (WithClock), the same for every replica up to their clocks'
//     skew: a database engine stores deadlines as Unix nanoseconds of the replica that set them.

// Lease bounds.
const (
	// DefaultMaxAttempts is the default number of leases a message may have before it becomes a
	// dead letter (Pub/Sub's default for max delivery attempts is 5 too).
	DefaultMaxAttempts = 5
	// MaxMaxAttempts bounds an owner's MaxAttempts.
	MaxMaxAttempts = 1000
	// DefaultVisibility is the default lease length (SQS's default visibility timeout, JetStream's
	// default AckWait).
	DefaultVisibility = 30 * time.Second
	// MinVisibility and MaxVisibility bound a lease length, a Nack's delay (which may be 0) and an
	// extension (SQS's maximum visibility timeout is 12 hours).
	MinVisibility = time.Millisecond
	MaxVisibility = 12 * time.Hour
	// MaxLeaseBatch bounds the messages one Lease call takes.
	MaxLeaseBatch = 100
)

var (
	// ErrLeaseStale is returned by Ack, Nack and ExtendLease for a receipt whose lease is no
	// longer held: the message was leased again, acknowledged, nacked, popped, dead-lettered, or
	// returned by Unregister to an owner registered again since (an owner not registered is
	// ErrOwnerNotRegistered). Nothing changed. The error is a *LeaseStaleError.
	ErrLeaseStale = errors.New("lease no longer held")
	// ErrInvalidReceipt is returned by ParseReceipt for text that is not a receipt.
	ErrInvalidReceipt = errors.New("invalid lease receipt")
)

// OwnerSettings are the lease options of one owner, set at Register; zero fields mean the
// Exchange's defaults (WithLeaseDefaults).
type OwnerSettings struct {
	// MaxAttempts is how many leases a message may have before it becomes a dead letter
	// (1..MaxMaxAttempts).
	MaxAttempts int
	// Visibility is the default lease length of Lease calls that set none
	// (MinVisibility..MaxVisibility).
	Visibility time.Duration
}

// WithLeaseDefaults sets the OwnerSettings an owner registered without them gets. The defaults
// are DefaultMaxAttempts and DefaultVisibility; values <= 0 keep them.
func WithLeaseDefaults(maxAttempts int, visibility time.Duration) Option {
	return func(o *options) {
		if maxAttempts > 0 {
			o.maxAttempts = maxAttempts
		}
		if visibility > 0 {
			o.visibility = visibility
		}
	}
}

// Resolve fills s's zero fields from the Exchange's defaults, then holds both within their bounds
// (1..MaxMaxAttempts, MinVisibility..MaxVisibility). Every engine keeps what Resolve returns. The
// handlers refuse values out of bounds before they get here; an in-process caller, or defaults
// out of bounds, get the nearest bound rather than an error (review of issue 18, N3: a
// MaxAttempts past MaxMaxAttempts would hand out receipts ParseReceipt refuses).
func (s OwnerSettings) Resolve(defaults Settings) OwnerSettings {
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = defaults.MaxAttempts
	}
	if s.Visibility <= 0 {
		s.Visibility = defaults.Visibility
	}
	s.MaxAttempts = min(max(s.MaxAttempts, 1), MaxMaxAttempts)
	s.Visibility = ClampVisibility(s.Visibility)
	return s
}

// RegisterSettings is the OwnerSettings an engine's Register keeps from its variadic settings:
// the first (none: all zero), Resolved against the engine's defaults.
func RegisterSettings(settings []OwnerSettings, defaults Settings) OwnerSettings {
	var s OwnerSettings
	if len(settings) > 0 {
		s = settings[0]
	}
	return s.Resolve(defaults)
}

// ClampVisibility holds a lease length or an extension within MinVisibility..MaxVisibility.
func ClampVisibility(d time.Duration) time.Duration { return min(max(d, MinVisibility), MaxVisibility) }

// ClampDelay holds a Nack's delay within 0..MaxVisibility (0: visible at once).
func ClampDelay(d time.Duration) time.Duration { return min(max(d, 0), MaxVisibility) }

// Receipt names one lease: the message, the sender whose inbox holds it, and the attempt the lease
// was. It travels as opaque text (String, ParseReceipt).
type Receipt struct {
	Message, Sender uuid.UUID
	Attempt         int
}

// receiptVersion starts every encoded receipt, so the format can change without old receipts
// being misread.
const receiptVersion = 1

// String encodes r as URL-safe base64 text with no padding.
func (r Receipt) String() string {
	b := make([]byte, 0, 1+32+binary.MaxVarintLen64)
	b = append(b, receiptVersion)
	b = append(b, r.Message[:]...)
	b = append(b, r.Sender[:]...)
	b = binary.AppendUvarint(b, uint64(r.Attempt))
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseReceipt decodes a Receipt.String; anything else is ErrInvalidReceipt.
func ParseReceipt(s string) (Receipt, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 34 || b[0] != receiptVersion {
		return Receipt{}, ErrInvalidReceipt
	}
	var r Receipt
	copy(r.Message[:], b[1:17])
	copy(r.Sender[:], b[17:33])
	n, k := binary.Uvarint(b[33:])
	if k <= 0 || 33+k != len(b) || n == 0 || n > MaxMaxAttempts {
		return Receipt{}, ErrInvalidReceipt
	}
	r.Attempt = int(n)
	return r, nil
}

// LeaseStaleError is the ErrLeaseStale of one receipt.
type LeaseStaleError struct {
	Owner   uuid.UUID
	Receipt Receipt
}

func (e *LeaseStaleError) Error() string {
	return fmt.Sprintf("%v: message %s, attempt %d, at owner %s: it was leased again, acknowledged, nacked, popped, dead-lettered or returned since",
		ErrLeaseStale, e.Receipt.Message, e.Receipt.Attempt, e.Owner)
}

// Unwrap returns ErrLeaseStale.
func (e *LeaseStaleError) Unwrap() error { return ErrLeaseStale }

// ErrorMetadata names the lease under lowerCamel keys.
func (e *LeaseStaleError) ErrorMetadata() map[string]string {
	return map[string]string{"ownerId": e.Owner.String(), "messageId": e.Receipt.Message.String(), "attempt": strconv.Itoa(e.Receipt.Attempt)}
}

// StaleLease returns the error Ack, Nack and ExtendLease return for a receipt no longer held.
func StaleLease(owner uuid.UUID, r Receipt) error { return &LeaseStaleError{Owner: owner, Receipt: r} }

// LeaseRequest is one Lease call.
type LeaseRequest struct {
	// Owner is the registered owner whose inboxes to lease from.
	Owner uuid.UUID
	// Sender, when not nil, restricts the lease to that sender's inbox.
	Sender *uuid.UUID
	// Max is the most messages to lease (< 1 means 1; at most MaxLeaseBatch).
	Max int
	// MaxBytes, when > 0, stops the batch before a message whose size (MessageSize) would take
	// the batch's total past it; the first message is always taken.
	MaxBytes int64
	// MaxHeld, when > 0, leases only while fewer than MaxHeld of the scope's messages are held
	// by unexpired leases (counting those this call takes): a leasing stream's max_in_flight.
	MaxHeld int
	// Visibility is the lease length; 0 means the owner's OwnerSettings.Visibility.
	Visibility time.Duration
}

// Bounds returns how many messages r may lease (Max within 1..MaxLeaseBatch) and for how long
// (Visibility, or owner's when it is <= 0, within MinVisibility..MaxVisibility): every engine
// reads r through it, so they hold an in-process request to the same bounds (review N3).
func (r LeaseRequest) Bounds(owner OwnerSettings) (batch int, visibility time.Duration) {
	visibility = r.Visibility
	if visibility <= 0 {
		visibility = owner.Visibility
	}
	return min(max(r.Max, 1), MaxLeaseBatch), ClampVisibility(visibility)
}

// Leased is one message handed out by Lease.
type Leased struct {
	Message  *envelope.Message
	Receipt  Receipt
	Deadline time.Time
}

// LeaseResult is what one Lease call took.
type LeaseResult struct {
	// Leases are the messages leased, in Receive's order.
	Leases []Leased
	// Held is the number of the scope's messages held by unexpired leases after the call.
	Held int
	// NextVisible is the earliest time a message of the scope that is hidden now becomes
	// visible; zero when none is hidden.
	NextVisible time.Time
	// More is set when visible messages of the scope may be left that this call did not take
	// (Max, MaxBytes or MaxHeld stopped it): a caller that wants them all leases again. It is
	// never unset while one is left; a database engine that took exactly Max may set it with
	// none left (it does not read further to tell).
	More bool
}

// LeaseInfo is how a message in an inbox stands with leases, for Receive.
type LeaseInfo struct {
	// Attempts is the number of leases it has had; 0 for a message never leased (the rest of the
	// fields are then zero).
	Attempts int
	// VisibleAt is when it is visible again (a lease's deadline or a Nack's delay's end).
	VisibleAt time.Time
	// Held is set while a lease holds it (until Ack, Nack or another taker, even past VisibleAt).
	Held bool
}

// Hidden reports whether the message is invisible to Lease and Pop at now.
func (l LeaseInfo) Hidden(now time.Time) bool { return l.Attempts > 0 && now.Before(l.VisibleAt) }

// MessageSize is the size LeaseRequest.MaxBytes counts for m: its estimated heap bytes, which
// bound its encoded size without its rendering. A database engine may count its stored JSON's
// length instead: MaxBytes is a guard for the response budget, not an exact figure.
func MessageSize(m *envelope.Message) int64 { return m.HeapBytes() }
