package server

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store"
)

// errorDomain is the google.rpc.ErrorInfo domain of every status historyd sends (docs/design.md#wire-model).
const errorDomain = "historyd"

// internalMessage is the only text a client ever sees for an error the server did not expect; the
// real error is logged, never sent (docs/design.md#errors).
const internalMessage = "internal error"

// errorRule maps one domain error to a gRPC code and an ErrorReason. target is matched with
// errors.Is, so it is a sentinel (ErrX) that the domain returns or wraps with %w, or that a typed
// domain error names in its Unwrap or Is method.
type errorRule struct {
	target error
	code   codes.Code
	reason historyv1.ErrorReason
}

// errorRules is the table toStatus consults, first match wins. Each issue that adds a domain
// sentinel adds its row here (and errors_test.go checks every row), for example:
//
//	{store.ErrBranchNotFound, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND},
var errorRules = []errorRule{
	// Exchange (issue 6; ADR-0006 D5). ErrorInfo metadata: ownerId.
	{exchange.ErrOwnerNotRegistered, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_OWNER_NOT_REGISTERED},
	{exchange.ErrOwnerAlreadyRegistered, codes.AlreadyExists, historyv1.ErrorReason_ERROR_REASON_OWNER_ALREADY_REGISTERED},
	{exchange.ErrOutboxFull, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_OUTBOX_FULL},
	{exchange.ErrSubscriberTooSlow, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW},
	// Leases (issue 18; exchange_lease.go): a receipt whose lease is no longer held changes nothing.
	// Metadata: ownerId, messageId, attempt.
	{exchange.ErrLeaseStale, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_LEASE_STALE},
	// A Send racing the shutdown that closed the Exchange (main closes it after the server stops).
	{exchange.ErrClosed, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN},
	// An Unregister whose response would be too large removes nothing (exchange_response.go).
	// Metadata: ownerId, responseBytes, maxResponseBytes, queuedCount, inboxCount, deadLetterCount.
	{errOwnerHoldsTooMuch, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_OWNER_HOLDS_TOO_MUCH},
	// Issue 11: the response budget (exchange_budget.go; metadata responseBytes, maxResponseBytes,
	// flag, messageId), the Exchange's byte budget (metadata usedBytes, budgetBytes, messageBytes,
	// flag) and the inbox stream limit.
	{errExchangeResponseTooLarge, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE},
	{exchange.ErrBudgetExceeded, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_EXCHANGE_BUDGET_EXCEEDED},
	{exchange.ErrTooManySubscriptions, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS},
	// Long-lived streams (stream.go).
	{errSlowConsumer, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW},
	{errShuttingDown, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN},
	{errFrameTooLarge, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_FRAME_TOO_LARGE},
	// The response budget, the render cap and the import limit (issue 11; history_budget.go).
	// Metadata: responseBytes, maxResponseBytes, flag (and branchId, messageId where one is named);
	// messageId, renderedBytes, maxRenderedBytes, flag; importBytes, maxImportBytes, flag.
	{errResponseTooLarge, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE},
	{envelope.ErrRenderTooLarge, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RENDER_TOO_LARGE},
	{errImportTooLarge, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_IMPORT_TOO_LARGE},
	// Branch histories (issue 4; ADR-0006 D3, docs/design.md#branches). ErrorInfo metadata: branchId,
	// messageId, headSequence, oldestSequence, lastSequence.
	{store.ErrBranchNotFound, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND},
	{store.ErrBranchExists, codes.AlreadyExists, historyv1.ErrorReason_ERROR_REASON_BRANCH_ALREADY_EXISTS},
	{store.ErrMessageNotFound, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_MESSAGE_NOT_FOUND},
	{store.ErrInvalidProgression, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_PROGRESSION},
	{store.ErrKindChange, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_MESSAGE_KIND_CHANGE},
	{store.ErrNotActionRequest, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_NOT_AN_ACTION_REQUEST},
	{store.ErrSequenceMismatch, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_SEQUENCE_MISMATCH},
	{store.ErrMemoryBudget, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_MEMORY_BUDGET_EXCEEDED},
	{store.ErrHistoryCompacted, codes.OutOfRange, historyv1.ErrorReason_ERROR_REASON_HISTORY_COMPACTED},
	{store.ErrSubscriberTooSlow, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW},
	{store.ErrBranchDeleted, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_DELETED},
	{store.ErrTooManySubscriptions, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS},
	// The durable engine's storage (issue 15): a full disk or --max-db-bytes, an I/O error, and a
	// damaged page (DATA_LOSS, not UNAVAILABLE: clients retry UNAVAILABLE, and a retry cannot mend
	// a damaged page; the reason stays STORAGE_UNAVAILABLE, the database being unusable). The
	// message names the database file; SQLite's error goes to the log only (causeError). Metadata:
	// file (and maxDbBytes, flag).
	// A call that raced the store's close at shutdown (a backup Close cancelled, a write queued
	// behind the last batch).
	{store.ErrClosed, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN},
	{store.ErrStorageFull, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_STORAGE_FULL},
	{store.ErrStorageUnavailable, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_STORAGE_UNAVAILABLE},
	{store.ErrStorageDamaged, codes.DataLoss, historyv1.ErrorReason_ERROR_REASON_STORAGE_UNAVAILABLE},
	// Backup (issue 15; admin_service.go): one at a time, and only of a store with a database.
	{store.ErrBackupInProgress, codes.Aborted, historyv1.ErrorReason_ERROR_REASON_BACKUP_IN_PROGRESS},
	{store.ErrBackupUnsupported, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_BACKUP_UNSUPPORTED},
	// The envelope (issue 3; ADR-0001 D1-D3). Other envelope errors are *envelope.FieldError and
	// map to INVALID_FIELD through the fieldError rule below.
	{envelope.ErrClassMismatch, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_LION_CLASS_MISMATCH},
	{envelope.ErrUnknownClass, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_UNKNOWN_LION_CLASS},
}

// metadataError is implemented by domain errors that name the entities involved. Its keys become
// the ErrorInfo metadata and must be the lowerCamel keys of docs/design.md#wire-model (branchId,
// messageId, ownerId, headSequence, lastSequence, oldestSequence). Domain packages implement it
// structurally; they never import this package.
type metadataError interface {
	error
	ErrorMetadata() map[string]string
}

// causeError is implemented by domain errors whose message is worded for the client and whose
// cause (an engine's own error, naming its internals) is for the server's log only: the call's log
// line carries it as grpc.error_cause (internalCause).
type causeError interface {
	error
	LogCause() error
}

// fieldError is implemented by errors that reject one input field: toStatus turns them into
// INVALID_ARGUMENT with reason ERROR_REASON_INVALID_FIELD, a google.rpc.BadRequest naming the field
// and ErrorInfo metadata key "field". FieldError implements it; domain packages may implement it
// structurally with their own types.
type fieldError interface {
	error
	InvalidField() string
}

// FieldError rejects the value of one request field. Field is the field's path in the request as a
// client spells it in proto (for example "message.sender"); Err says what is wrong with it.
type FieldError struct {
	Field string
	Err   error
}

// Error returns "<field>: <reason>".
func (e *FieldError) Error() string { return fmt.Sprintf("%s: %v", e.Field, e.Err) }

// Unwrap returns the underlying reason, so that errors.Is sees the sentinel it wraps.
func (e *FieldError) Unwrap() error { return e.Err }

// InvalidField returns the path of the rejected field.
func (e *FieldError) InvalidField() string { return e.Field }

// redactedError is a status whose client-facing message is fixed, its cause kept for the log: what
// toStatus returns for an error it has no rule for (the fixed INTERNAL status). The logging
// interceptor logs the cause next to the call. (The memory budget refusal was redacted too, until
// issue 11 asked every RESOURCE_EXHAUSTED to carry its figures; ADR-0009.)
type redactedError struct {
	cause error
	st    *status.Status
}

// Error returns the fixed client-facing message, never the cause.
func (e *redactedError) Error() string { return e.st.Message() }

// GRPCStatus lets grpc-go send the fixed status. It must be the error returned to grpc, unwrapped:
// grpc-go replaces the message of a wrapped status with the wrapper's text.
func (e *redactedError) GRPCStatus() *status.Status { return e.st }

// toStatus maps an error from the domain to the gRPC status error sent to the client. nil stays nil;
// an error that already is a gRPC status passes through; errorRules give the code and reason of
// domain sentinels; a fieldError becomes INVALID_ARGUMENT; context cancellation and deadline
// become CANCELED and DEADLINE_EXCEEDED (the client gave up, so they carry no reason and are not
// logged as errors); anything else becomes INTERNAL with a fixed message, its cause kept for the
// log only.
func toStatus(err error) error {
	return statusFrom(errorRules, err)
}

// statusFrom is toStatus over an explicit rule table, so that tests can exercise the mechanism with
// rules of their own.
func statusFrom(rules []errorRule, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	code, reason, matched := codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, false
	msg := err.Error()
	for _, r := range rules {
		if errors.Is(err, r.target) {
			code, reason, matched = r.code, r.reason, true
			break
		}
	}
	md := metadataOf(err)
	st := status.New(code, msg)
	// A rejected field is named in a google.rpc.BadRequest and in the "field" metadata key, also
	// when a rule gives the error a more specific reason (LION_CLASS_MISMATCH names
	// metadata.lion_class). A field error that names no field (an empty InvalidField) is still an
	// input error, but names none.
	if fe, ok := errors.AsType[fieldError](err); ok {
		if field := fe.InvalidField(); field != "" {
			if md == nil {
				md = map[string]string{}
			}
			md["field"] = field
			st = withDetails(st, &errdetails.BadRequest{
				FieldViolations: []*errdetails.BadRequest_FieldViolation{{
					Field:       field,
					Description: fe.Error(),
				}},
			})
		}
		matched = true
	}
	if matched {
		st = withErrorInfo(st, reason, md)
		if ce, ok := errors.AsType[causeError](err); ok && ce.LogCause() != nil {
			return &redactedError{cause: ce.LogCause(), st: st}
		}
		return st.Err()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return &redactedError{cause: err, st: internalStatus()}
}

// internalStatus is the fixed INTERNAL status for an unexpected error or a recovered panic.
func internalStatus() *status.Status {
	return withErrorInfo(status.New(codes.Internal, internalMessage),
		historyv1.ErrorReason_ERROR_REASON_INTERNAL, nil)
}

// metadataOf returns a copy of the ErrorInfo metadata that err (or an error it wraps) names, or nil.
func metadataOf(err error) map[string]string {
	me, ok := errors.AsType[metadataError](err)
	if !ok {
		return nil
	}
	md := me.ErrorMetadata()
	if len(md) == 0 {
		return nil
	}
	return maps.Clone(md)
}

// withErrorInfo returns st with the google.rpc.ErrorInfo for reason attached.
func withErrorInfo(st *status.Status, reason historyv1.ErrorReason, md map[string]string) *status.Status {
	return withDetails(st, &errdetails.ErrorInfo{
		Reason:   reason.String(),
		Domain:   errorDomain,
		Metadata: md,
	})
}

// withDetails returns st with details added. WithDetails fails only for an OK status, which this
// package never builds; st is then returned unchanged rather than lost.
func withDetails(st *status.Status, details ...protoadapt.MessageV1) *status.Status {
	withD, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return withD
}
