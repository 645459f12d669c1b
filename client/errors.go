package client

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// errorDomain is the ErrorInfo domain of historyd's errors (docs/design.md#wire-model).
const errorDomain = "historyd"

// ErrorInfo returns the google.rpc.ErrorInfo that historyd attaches to every non-OK status
// (docs/design.md#errors), or nil when err carries none (a transport error, another server).
func ErrorInfo(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			return info
		}
	}
	return nil
}

// Reason returns historyd's reason for err (ERROR_REASON_BRANCH_NOT_FOUND, ...), or
// ERROR_REASON_UNSPECIFIED when err carries none. Switch on it, not on the message text.
func Reason(err error) historyv1.ErrorReason {
	info := ErrorInfo(err)
	if info == nil {
		return historyv1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	return historyv1.ErrorReason(historyv1.ErrorReason_value[info.GetReason()])
}

// ErrHistoryCompacted is matched (errors.Is) by every *CompactedError.
var ErrHistoryCompacted = errors.New("client: history compacted")

// CompactedError is the error of a watch whose cursor the server no longer retains, or whose
// cursor belongs to another incarnation of the branch (OUT_OF_RANGE, ERROR_REASON_HISTORY_COMPACTED;
// docs/design.md#sequences: never a silent restart). Re-read the branch (ListMessages
// gives its head_sequence) and watch again from there.
type CompactedError struct {
	// BranchID is the watched branch.
	BranchID string
	// After is the cursor the watch asked to resume from.
	After uint64
	// OldestSequence is the oldest sequence the server still retains (ErrorInfo oldestSequence).
	OldestSequence uint64
	// Err is the gRPC status error.
	Err error
}

// Error implements error.
func (e *CompactedError) Error() string {
	return fmt.Sprintf("client: watch of branch %s after sequence %d: history compacted, oldest retained sequence %d: %v",
		e.BranchID, e.After, e.OldestSequence, e.Err)
}

// Unwrap returns the gRPC status error.
func (e *CompactedError) Unwrap() error { return e.Err }

// Is reports target == ErrHistoryCompacted.
func (e *CompactedError) Is(target error) bool { return target == ErrHistoryCompacted }
