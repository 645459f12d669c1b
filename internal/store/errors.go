package store

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Sentinel errors. Every error the package returns wraps one of these (test
// with errors.Is); the typed errors below add the ids and sequences that
// internal/server puts in the google.rpc.ErrorInfo metadata.
var (
	// ErrBranchNotFound: no branch has the id (NOT_FOUND).
	ErrBranchNotFound = errors.New("branch not found")

	// ErrBranchExists: a create, fork or import named an id that is taken
	// (ALREADY_EXISTS; docs/design.md#branches).
	ErrBranchExists = errors.New("branch already exists")

	// ErrMessageNotFound: the named message is not in the branch (NOT_FOUND).
	ErrMessageNotFound = errors.New("message not found")

	// ErrInvalidProgression: an order or progression names an id that is not
	// a member of the branch, or names one twice (INVALID_ARGUMENT; ADR-0006
	// D3: "One or more messages in the requested progression are invalid.").
	ErrInvalidProgression = fmt.Errorf("%w: %s", envelope.ErrInvalid, InvalidProgressionMessage)

	// ErrKindChange: a write under an existing id would change the message's
	// class (INVALID_ARGUMENT; docs/design.md#branches).
	ErrKindChange = fmt.Errorf("%w: a message's kind cannot change", envelope.ErrInvalid)

	// ErrNotActionRequest: an action output names a message that is not an
	// ActionRequest (INVALID_ARGUMENT; ADR-0006 D2).
	ErrNotActionRequest = fmt.Errorf("%w: not an action request", envelope.ErrInvalid)

	// ErrOneMessageType: the factory inputs select more than one message
	// kind (INVALID_ARGUMENT; ADR-0006 D3, LionAGI's exact text).
	ErrOneMessageType = fmt.Errorf("%w: %s", envelope.ErrInvalid, OneMessageTypeMessage)

	// ErrNoActionRequest: an action output or response was given without
	// the ActionRequest it answers (INVALID_ARGUMENT; LionAGI's text).
	ErrNoActionRequest = fmt.Errorf("%w: %s", envelope.ErrInvalid, "Error: please provide a corresponding action request for an action response.")

	// ErrNotSystem: SetSystem or the constructor was given a message that is
	// not a System (INVALID_ARGUMENT; ADR-0006 D3: "System message must be a
	// System instance.").
	ErrNotSystem = fmt.Errorf("%w: %s", envelope.ErrInvalid, NotSystemMessage)

	// ErrSequenceMismatch: expected_head_sequence differs from the branch's
	// head (FAILED_PRECONDITION; docs/design.md#optimistic-concurrency).
	ErrSequenceMismatch = errors.New("head sequence mismatch")

	// ErrMemoryBudget: the write would take the store over its memory
	// budget; nothing was changed (RESOURCE_EXHAUSTED).
	ErrMemoryBudget = errors.New("memory budget exceeded")

	// ErrRequestIDReused: a request_id already answered another method on
	// the same scope (INVALID_ARGUMENT).
	ErrRequestIDReused = fmt.Errorf("%w: request_id was used by another method", envelope.ErrInvalid)

	// ErrStalePageToken: a page token belongs to another branch, another
	// query, or a history that has since been cleared (INVALID_ARGUMENT).
	ErrStalePageToken = fmt.Errorf("%w: page_token does not belong to this query or is stale", envelope.ErrInvalid)

	// ErrHistoryCompacted: a watch cursor is older than the retained event
	// log or names another incarnation of the branch (OUT_OF_RANGE;
	// docs/design.md#sequences).
	ErrHistoryCompacted = errors.New("history compacted")

	// ErrCursorAhead: a watch cursor is ahead of the head sequence of the
	// same incarnation (INVALID_ARGUMENT).
	ErrCursorAhead = fmt.Errorf("%w: cursor is ahead of the head sequence", envelope.ErrInvalid)

	// ErrSubscriberTooSlow: a subscription fell behind its bounded buffer
	// and was ended; resume after its last delivered sequence
	// (RESOURCE_EXHAUSTED).
	ErrSubscriberTooSlow = errors.New("subscriber too slow")

	// ErrBranchDeleted: the branch was deleted while a subscription was
	// open (NOT_FOUND).
	ErrBranchDeleted = errors.New("branch deleted")

	// ErrTooManySubscriptions: the store's limit of open subscriptions
	// (WithMaxSubscriptions) is reached (RESOURCE_EXHAUSTED).
	ErrTooManySubscriptions = errors.New("too many open subscriptions")

	// ErrSubscriptionClosed: Next was called after Close.
	ErrSubscriptionClosed = errors.New("subscription closed")

	// ErrObserver: one or more message-added observers failed after the
	// write was committed (ADR-0006 D4). The write stands.
	ErrObserver = errors.New("on_message_added observers failed")

	// ErrStorageFull: a durable engine's storage could not grow (the disk
	// is full, or the database reached its configured size); the write
	// changed nothing and reads go on (RESOURCE_EXHAUSTED; issue 15).
	ErrStorageFull = errors.New("storage full")

	// ErrStorageUnavailable: a durable engine's storage failed to read or
	// write (an I/O error); a retry may succeed (UNAVAILABLE; issue 15).
	ErrStorageUnavailable = errors.New("storage unavailable")

	// ErrStorageDamaged: a durable engine's storage holds a damaged page or
	// row; a retry will not help until an operator restores the database
	// (DATA_LOSS; issue 15).
	ErrStorageDamaged = errors.New("storage damaged")

	// ErrClosed: the call raced the store's close at shutdown (UNAVAILABLE,
	// SERVER_SHUTTING_DOWN: retry against a server that is up).
	ErrClosed = errors.New("store closed")
)

// The exact texts LionAGI raises, which historyd keeps (ADR-0006 D3).
const (
	InvalidProgressionMessage = "One or more messages in the requested progression are invalid."
	OneMessageTypeMessage     = "Only one message type can be added at a time."
	NotSystemMessage          = "System message must be a System instance."
)

// BranchError names the branch an error is about.
type BranchError struct {
	Err      error // the sentinel
	BranchID uuid.UUID
}

func (e *BranchError) Error() string { return e.Err.Error() + ": " + e.BranchID.String() }

// Unwrap returns the sentinel.
func (e *BranchError) Unwrap() error { return e.Err }

// ErrorMetadata returns {branchId}.
func (e *BranchError) ErrorMetadata() map[string]string {
	return map[string]string{"branchId": e.BranchID.String()}
}

// SubscriptionLimitError is ErrTooManySubscriptions with the figures: the
// subscriptions open when the branch was asked for one more, and the limit
// (WithMaxSubscriptions).
type SubscriptionLimitError struct {
	BranchID    uuid.UUID
	Open, Limit int
}

func (e *SubscriptionLimitError) Error() string {
	return fmt.Sprintf("%v: %d subscriptions are open, the limit is %d (branch %s)", ErrTooManySubscriptions, e.Open, e.Limit, e.BranchID)
}

// Unwrap returns ErrTooManySubscriptions.
func (e *SubscriptionLimitError) Unwrap() error { return ErrTooManySubscriptions }

// ErrorMetadata returns {branchId, openStreams, maxStreams}.
func (e *SubscriptionLimitError) ErrorMetadata() map[string]string {
	return map[string]string{"branchId": e.BranchID.String(), "openStreams": strconv.Itoa(e.Open), "maxStreams": strconv.Itoa(e.Limit)}
}

// MessageError names the branch and the message an error is about. Field,
// when set, is the request field that named the message (its path as the
// wire spells it), so the error also reads as a field error where the
// sentinel is an input error.
type MessageError struct {
	Err       error
	BranchID  uuid.UUID
	MessageID uuid.UUID
	Field     string
	Detail    string // what is wrong, when the sentinel does not say it all
}

func (e *MessageError) Error() string {
	s := e.Err.Error() + ": message " + e.MessageID.String() + " in branch " + e.BranchID.String()
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel.
func (e *MessageError) Unwrap() error { return e.Err }

// InvalidField returns Field when the sentinel is an input error
// (envelope.ErrInvalid), else "": a message that is not found is not a
// malformed field.
func (e *MessageError) InvalidField() string {
	if errors.Is(e.Err, envelope.ErrInvalid) {
		return e.Field
	}
	return ""
}

// ErrorMetadata returns {branchId, messageId}.
func (e *MessageError) ErrorMetadata() map[string]string {
	return map[string]string{"branchId": e.BranchID.String(), "messageId": e.MessageID.String()}
}

// SequenceError reports the branch's sequences: the head for
// ErrSequenceMismatch and ErrCursorAhead, the oldest retained sequence
// for ErrHistoryCompacted, the last delivered one for ErrSubscriberTooSlow
// and ErrBranchDeleted.
type SequenceError struct {
	Err      error
	BranchID uuid.UUID
	Head     uint64
	Oldest   uint64 // ErrHistoryCompacted only
	Last     uint64 // ErrSubscriberTooSlow, ErrBranchDeleted only
}

func (e *SequenceError) Error() string {
	switch {
	case errors.Is(e.Err, ErrHistoryCompacted):
		return fmt.Sprintf("%v: oldest available sequence is %d (head %d)", e.Err, e.Oldest, e.Head)
	case e.endedStream():
		return fmt.Sprintf("%v: last delivered sequence %d", e.Err, e.Last)
	}
	return fmt.Sprintf("%v: head sequence is %d", e.Err, e.Head)
}

// Unwrap returns the sentinel.
func (e *SequenceError) Unwrap() error { return e.Err }

// endedStream reports whether e ended an open subscription, whose cursor
// to resume from is Last: too slow, deleted, or its storage lost (a
// database engine's connection, issue 16) or closed under it.
func (e *SequenceError) endedStream() bool {
	for _, reason := range []error{ErrSubscriberTooSlow, ErrBranchDeleted, ErrStorageUnavailable, ErrClosed} {
		if errors.Is(e.Err, reason) {
			return true
		}
	}
	return false
}

// ErrorMetadata returns branchId and the sequences that apply, under the
// keys of docs/design.md#wire-model.
func (e *SequenceError) ErrorMetadata() map[string]string {
	md := map[string]string{"branchId": e.BranchID.String(), "headSequence": strconv.FormatUint(e.Head, 10)}
	switch {
	case errors.Is(e.Err, ErrHistoryCompacted):
		md["oldestSequence"] = strconv.FormatUint(e.Oldest, 10)
	case e.endedStream():
		md["lastSequence"] = strconv.FormatUint(e.Last, 10)
		delete(md, "headSequence")
	}
	return md
}

// BudgetError reports a write refused by the memory budget, with the
// figures a client needs to tell what was exceeded and by how much (issue 11:
// every RESOURCE_EXHAUSTED names its figures and the flag that sets them).
type BudgetError struct {
	Need, Used, Budget int64
}

// FlagMemoryBudget is the historyd flag that sets the memory budget.
const FlagMemoryBudget = "--memory-budget"

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%v: the write needs %d bytes, %d of %d are in use (%s)", ErrMemoryBudget, e.Need, e.Used, e.Budget, FlagMemoryBudget)
}

// ErrorMetadata gives the figures as ErrorInfo metadata: requestBytes (what
// the write needs), usedBytes, budgetBytes and flag.
func (e *BudgetError) ErrorMetadata() map[string]string {
	return map[string]string{
		"requestBytes": strconv.FormatInt(e.Need, 10),
		"usedBytes":    strconv.FormatInt(e.Used, 10),
		"budgetBytes":  strconv.FormatInt(e.Budget, 10),
		"flag":         FlagMemoryBudget,
	}
}

// Unwrap returns ErrMemoryBudget.
func (e *BudgetError) Unwrap() error { return ErrMemoryBudget }

// ObserverError carries the failures of the message-added observers of one
// write (ADR-0006 D4: every observer runs; failures are collected and
// returned; the write stays committed).
type ObserverError struct {
	Errs []error
}

func (e *ObserverError) Error() string {
	return fmt.Sprintf("%v (%d): %v", ErrObserver, len(e.Errs), errors.Join(e.Errs...))
}

// Unwrap returns ErrObserver and every observer's error, so errors.Is and
// errors.As see each of them.
func (e *ObserverError) Unwrap() []error { return append([]error{ErrObserver}, e.Errs...) }

// fieldErr is an input error naming a request field, wrapping sentinel.
func fieldErr(field string, sentinel error, format string, args ...any) error {
	return &envelope.FieldError{Field: field, Msg: fmt.Sprintf(format, args...), Err: sentinel}
}
