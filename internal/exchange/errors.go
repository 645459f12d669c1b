package exchange

import (
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/google/uuid"
)

// Sentinel errors. Every error the package returns wraps one of these (test with errors.Is); the
// ones about an owner are an *OwnerError that names it.
var (
	// ErrOwnerNotRegistered is returned when Send or Collect names a sender that is not registered
	// (ADR-0006 D5: "sending or collecting for an unregistered sender raise ValueError"), and when a
	// subscription's owner is not registered or leaves.
	ErrOwnerNotRegistered = errors.New("owner not registered")

	// ErrOwnerAlreadyRegistered is returned by Register for an owner that is registered already
	// (ADR-0006 D5: "duplicate registration ... raise ValueError").
	ErrOwnerAlreadyRegistered = errors.New("owner already registered")

	// ErrOutboxFull is returned by Send when the sender's outbox holds the configured maximum of
	// queued messages (WithMaxOutbox); collect first.
	ErrOutboxFull = errors.New("outbox full")

	// ErrSubscriberTooSlow ends a subscription whose bounded buffer was full when a message landed:
	// the collector never waits for a subscriber, so a slow one is evicted and catches up with
	// Receive (docs/design.md#exchange: inboxes are the durable state).
	ErrSubscriberTooSlow = errors.New("subscriber too slow: its buffer was full")

	// ErrBudgetExceeded is wrapped by the *BudgetError Send returns when the message would take
	// the Exchange past its byte budget (WithByteBudget); nothing was queued.
	ErrBudgetExceeded = errors.New("exchange byte budget exceeded")

	// ErrTooManySubscriptions is returned by Subscribe when the Exchange has the configured
	// maximum of live subscriptions (WithMaxSubscriptions).
	ErrTooManySubscriptions = errors.New("too many inbox subscriptions")

	// ErrInvalidRequestID is returned by Send for a request id longer than MaxRequestIDLength or
	// holding U+0000 (CheckRequestID).
	ErrInvalidRequestID = errors.New("invalid request id")

	// ErrClosed is returned by Send and Subscribe once Close has shut the Exchange, and ends the
	// subscriptions that were live then. What the owners hold stays readable.
	ErrClosed = errors.New("exchange closed")
)

// OwnerError is an error about one owner. It names the owner for the error's text and for the
// gRPC ErrorInfo metadata (key "ownerId", docs/design.md#wire-model), and unwraps to its sentinel.
type OwnerError struct {
	// Owner is the owner the error is about.
	Owner uuid.UUID
	// Role says which argument named the owner, for the text: "Sender" or "Owner" (LionAGI's words).
	Role string
	// Err is the sentinel, ErrOwnerNotRegistered or ErrOwnerAlreadyRegistered, or an
	// *OutboxFullError.
	Err error
}

// Error returns LionAGI's wording, for example "Sender <uuid> not registered".
func (e *OwnerError) Error() string {
	switch e.Err {
	case ErrOwnerNotRegistered:
		return fmt.Sprintf("%s %s not registered", e.Role, e.Owner)
	case ErrOwnerAlreadyRegistered:
		return fmt.Sprintf("%s %s already registered", e.Role, e.Owner)
	}
	return fmt.Sprintf("%s %s: %v", e.Role, e.Owner, e.Err)
}

// Unwrap returns the sentinel.
func (e *OwnerError) Unwrap() error { return e.Err }

// ErrorMetadata names the owner under the lowerCamel key the gRPC layer puts in ErrorInfo, beside
// the metadata of Err when it has some (an *OutboxFullError's figures).
func (e *OwnerError) ErrorMetadata() map[string]string {
	md := map[string]string{}
	if me, ok := e.Err.(interface{ ErrorMetadata() map[string]string }); ok {
		maps.Copy(md, me.ErrorMetadata())
	}
	md["ownerId"] = e.Owner.String()
	return md
}

// OutboxFullError is the ErrOutboxFull of one Send, with its figures (review of issue 11: every
// RESOURCE_EXHAUSTED gives the figures).
type OutboxFullError struct {
	// Queued is the number of messages in the outbox; Limit is WithMaxOutbox.
	Queued, Limit int
}

func (e *OutboxFullError) Error() string {
	return fmt.Sprintf("%v: %d messages queued, at most %d; collect the outbox to make room", ErrOutboxFull, e.Queued, e.Limit)
}

// Unwrap returns ErrOutboxFull.
func (e *OutboxFullError) Unwrap() error { return ErrOutboxFull }

// ErrorMetadata gives the figures under lowerCamel keys.
func (e *OutboxFullError) ErrorMetadata() map[string]string {
	return map[string]string{"queuedCount": strconv.Itoa(e.Queued), "maxOutbox": strconv.Itoa(e.Limit)}
}

// TooManySubscriptionsError is the ErrTooManySubscriptions of one Subscribe, with its figures.
type TooManySubscriptionsError struct {
	// Open is the number of live subscriptions; Limit is WithMaxSubscriptions.
	Open, Limit int
}

func (e *TooManySubscriptionsError) Error() string {
	return fmt.Sprintf("%v: %d open, at most %d; end a subscription to open another", ErrTooManySubscriptions, e.Open, e.Limit)
}

// Unwrap returns ErrTooManySubscriptions.
func (e *TooManySubscriptionsError) Unwrap() error { return ErrTooManySubscriptions }

// ErrorMetadata gives the figures under lowerCamel keys.
func (e *TooManySubscriptionsError) ErrorMetadata() map[string]string {
	return map[string]string{"openStreams": strconv.Itoa(e.Open), "maxStreams": strconv.Itoa(e.Limit)}
}

func ownerErr(role string, owner uuid.UUID, err error) error {
	return &OwnerError{Owner: owner, Role: role, Err: err}
}
