package server

import (
	"sync"

	"github.com/google/uuid"
)

// appendIDs tracks, per (branch, request id), the items of one AppendMessages stream that went to
// the store and are not answered yet. An item that does not convert is answered from the record
// of its request id when there is one, as the unary call is (the repeat check comes first); an
// earlier item of the stream with the same request id may not be written yet when it is started,
// so its answer waits for that item's, and takes the record only if that item succeeded. A later
// item with the same request id never counts: the unary calls, sent one after another, would have
// answered this one before that one was written (issue 21: each item is answered as the unary call
// would be). The entries are the items in flight only, so at most a window of them.
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
	ok bool // one of them was answered with a result
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

// answered notes the answer of an item started with k: ok when it carried a result.
func (a *appendIDs) answered(k appendKey, e *appendID, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e.ok = e.ok || ok
	if e.n--; e.n == 0 && a.m[k] == e {
		delete(a.m, k)
	}
}

// succeeded reports whether an item of e was answered with a result.
func (a *appendIDs) succeeded(e *appendID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return e.ok
}
