package sqlrow

import (
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
)

// The scopes of the idempotency records (docs/design.md#idempotency,
// ADR-0010) as the requests table keys them: store.Memory's, a
// principal's branch-creating calls, a branch incarnation's writes, a
// branch id's deletes.

// CreatorScope is the scope of a principal's branch-creating calls.
func CreatorScope(principal string) string { return "p:" + principal }

// BranchScope is the scope of the writes to a branch's incarnation.
func BranchScope(incarnation uuid.UUID) string { return "i:" + incarnation.String() }

// DeleteScope is the scope of the deletes of a branch id.
func DeleteScope(id uuid.UUID) string { return "d:" + id.String() }

// Record is a request record as read from the requests table: the op that
// wrote it, when (the store's clock, unix nanoseconds), and its result's
// text.
type Record struct {
	Op     string
	At     int64
	Result string
}

// Recall is what the record answers a call of op with requestID at now
// (unix nanoseconds): its result, decoded by the engine's codec, if the
// record is younger than ttl (else nothing, as if there were none); an id
// another op used is ErrRequestIDReused.
func (r Record) Recall(codec rowjson.Codec, op store.Op, requestID string, now int64, ttl time.Duration) (any, bool, error) {
	switch {
	case now-r.At >= int64(ttl):
		return nil, false, nil
	case store.Op(r.Op) != op:
		return nil, false, store.FieldError("request_id", store.ErrRequestIDReused, "request_id %q was used by %s, not %s", requestID, r.Op, op)
	}
	res, err := codec.DecodeResult(op, r.Result)
	return res, err == nil, err
}

// RecallScope is the scope Store.Recall reads for a call of op: a
// delete's is the deletes of branchID (none without one); a branch
// write's, the writes of the branch's incarnation, which incarnation reads
// (ok false: no such branch, and an unknown branch remembers nothing; the
// call itself reports it); a branch-creating call's, the principal's. ok
// is false when there is no scope to read.
func RecallScope(principal string, branchID *uuid.UUID, op store.Op, incarnation func(branch uuid.UUID) (uuid.UUID, bool, error)) (scope string, ok bool, err error) {
	switch {
	case op == store.OpDeleteBranch:
		if branchID == nil {
			return "", false, nil
		}
		return DeleteScope(*branchID), true, nil
	case branchID != nil:
		inc, ok, err := incarnation(*branchID)
		if err != nil || !ok {
			return "", false, err
		}
		return BranchScope(inc), true, nil
	}
	return CreatorScope(principal), true, nil
}
