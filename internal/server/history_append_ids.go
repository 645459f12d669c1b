package server

import (
	"sync"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// appendIDs tracks, per (branch, request id), the items of one AppendMessages stream that went to
// the store and are not answered yet. An item that does not convert is answered from the record
// of its request id when there is one, as the unary call is (the repeat check comes first); an
// earlier item of the stream with the same request id may not be written yet when it is started,
// so its answer waits for that item's, and looks for the record only if that item may have
// written it (mayHaveWritten). A later item with the same request id never counts: the unary
// calls, sent one after another, would have answered this one before that one was written (issue
// 21: each item is answered as the unary call would be). The entries are the items in flight
// only, so at most a window of them.
type appendIDs struct {
	mu sync.Mutex
	m  map[appendKey]*appendID
}

type appendKey struct {
	branch uuid.UUID
	id     string
}

// appendID is a request id's items in flight in the stream.
type appendID struct {
	n  int  // items started and not answered
	ok bool // one of them may have written the record (mayHaveWritten)
}

// mayHaveWritten reports whether an item answered a (with its result, or with its error) may have
// written its request id's record. An error of the request itself (a bad field, an unknown
// branch, a head mismatch, a full disk or budget: nothing was changed) did not; one that leaves
// the outcome open (UNAVAILABLE "may or may not have been applied", INTERNAL, a deadline, ...)
// may have, and the record is looked for, as the unary call after it would find it.
func mayHaveWritten(a *historyv1.AppendMessagesResponse) bool {
	e := a.GetError()
	if e == nil {
		return true
	}
	switch codes.Code(e.GetCode()) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition, codes.OutOfRange,
		codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted, codes.Unimplemented:
		return false
	}
	return true
}

// earlier returns the entry of k's items in flight, or nil when there is none.
func (a *appendIDs) earlier(k appendKey) *appendID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[k]
}

// started counts an item with k that went to the store, and returns its entry.
func (a *appendIDs) started(k appendKey) *appendID {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[appendKey]*appendID{}
	}
	e := a.m[k]
	if e == nil {
		e = &appendID{}
		a.m[k] = e
	}
	e.n++
	return e
}

// answered notes the answer of an item started with k: ok when it may have written the record
// (mayHaveWritten).
func (a *appendIDs) answered(k appendKey, e *appendID, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e.ok = e.ok || ok
	if e.n--; e.n == 0 && a.m[k] == e {
		delete(a.m, k)
	}
}

// mayHaveRecorded reports whether an item of e may have written the record.
func (a *appendIDs) mayHaveRecorded(e *appendID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return e.ok
}
