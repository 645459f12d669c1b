package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store"
)

// The idempotency records (docs/design.md#idempotency, ADR-0010) in the
// requests table, as the SQLite engine keeps them (its requests.go). A
// branch write recalls its request id after it has locked the branch's
// row, and a branch-creating call after it has taken the advisory lock of
// its scope and id, in the transaction that writes: so the same request_id
// sent to two replicas at once writes once (issue 16).

func creatorScope(principal string) string { return "p:" + principal }
func branchScope(incarnation uuid.UUID) string {
	return "i:" + incarnation.String()
}
func deleteScope(id uuid.UUID) string { return "d:" + id.String() }

// lockKey is the advisory lock's key for a request id in a scope.
func lockKey(scope, requestID string) int64 {
	h := fnv.New64a()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(requestID))
	return int64(h.Sum64())
}

// recall returns the result remembered for requestID in scope, if it is
// within the window; an id another op used is ErrRequestIDReused.
func (s *Store) recall(ctx context.Context, q querier, scope string, op store.Op, requestID string) (any, bool, error) {
	if requestID == "" {
		return nil, false, nil
	}
	return s.recalled(q.QueryRow(ctx, qRequest, scope, requestID), op, requestID)
}

// recalled reads a row of qRequest (or qBranchRequest) as recall answers.
func (s *Store) recalled(r pgx.Row, op store.Op, requestID string) (any, bool, error) {
	var (
		gotOp  string
		at     int64
		result string
	)
	err := r.Scan(&gotOp, &at, &result)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case s.now().UnixNano()-at >= int64(s.cfg.RequestTTL):
		return nil, false, nil
	case store.Op(gotOp) != op:
		return nil, false, store.FieldError("request_id", store.ErrRequestIDReused, "request_id %q was used by %s, not %s", requestID, gotOp, op)
	}
	r2, err := decodeResult(op, result)
	return r2, err == nil, err
}

// remember queues, in the write's batch, the record of a successful
// write's result under its request id, forgetting its scope's oldest id
// past the bound (a range of requests_by_scope). Ids past the window are
// forgotten by the janitor: recall already ignores them, and a write
// filtering its scope's records by age would read the whole scope. The
// ordinal is the scope's next, worked out by the statement itself.
func (s *Store) remember(b *pgx.Batch, scope string, op store.Op, requestID string, result any) error {
	if requestID == "" {
		return nil
	}
	text, err := encodeResult(result)
	if err != nil {
		return err
	}
	now := s.now().UnixNano()
	b.Queue(qRemember, scope, requestID, string(op), now, text)
	b.Queue(qForgetOldest, scope, int64(s.cfg.RequestMax))
	return nil
}

// forgetScope forgets every id of a scope (a deleted branch's writes; the
// deletes of an id a new branch takes).
func forgetScope(b *pgx.Batch, scope string) { b.Queue(qForgetScope, scope) }

// resultJSON is a remembered result: one of a write's, a branch-creating
// call's (the branch and its system, the one message a response carries)
// or a delete's.
type resultJSON struct {
	Message  *storedJSON `json:"m,omitempty"`
	Index    int         `json:"i,omitempty"`
	Updated  *storedJSON `json:"u,omitempty"`
	Head     uint64      `json:"h,omitempty"`
	Branch   *infoJSON   `json:"b,omitempty"`
	System   *storedJSON `json:"s,omitempty"`
	BranchID *uuid.UUID  `json:"d,omitempty"`
	Last     uint64      `json:"l,omitempty"`
}

type storedJSON struct {
	Message  json.RawMessage `json:"m"`
	Sequence uint64          `json:"s"`
}

func encodeStored(m store.StoredMessage) (*storedJSON, error) {
	if m.Message == nil {
		return nil, nil
	}
	raw, err := m.Message.MarshalJSON()
	return &storedJSON{Message: raw, Sequence: m.Sequence}, err
}

func (j *storedJSON) decode() (store.StoredMessage, error) {
	if j == nil {
		return store.StoredMessage{}, nil
	}
	m, err := decodeMessage(string(j.Message))
	return store.StoredMessage{Message: m, Sequence: j.Sequence}, err
}

func encodeResult(result any) (string, error) {
	var (
		j   resultJSON
		err error
	)
	switch r := result.(type) {
	case store.WriteResult:
		j.Index, j.Head = r.Index, r.Head
		if j.Message, err = encodeStored(r.Message); err == nil && r.Updated != nil {
			j.Updated, err = encodeStored(*r.Updated)
		}
	case store.BranchResult:
		j.Branch = encodeInfo(r.Branch)
		if len(r.Messages) > 0 {
			j.System, err = encodeStored(r.Messages[0])
		}
	case store.DeleteResult:
		j.BranchID, j.Last = &r.BranchID, r.LastSequence
	default:
		return "", fmt.Errorf("postgres: cannot remember a %T", result)
	}
	if err != nil {
		return "", err
	}
	out, err := json.Marshal(j)
	return string(out), err
}

func decodeResult(op store.Op, text string) (any, error) {
	var j resultJSON
	if err := json.Unmarshal([]byte(text), &j); err != nil {
		return nil, fmt.Errorf("postgres: a remembered result: %w", err)
	}
	switch op {
	case store.OpCreateBranch, store.OpImportBranch, store.OpForkBranch:
		if j.Branch == nil {
			return nil, errors.New("postgres: a remembered branch result without its branch")
		}
		info, err := j.Branch.decode()
		if err != nil {
			return nil, err
		}
		res := store.BranchResult{Branch: info}
		if j.System != nil {
			sys, err := j.System.decode()
			if err != nil {
				return nil, err
			}
			res.Messages = []store.StoredMessage{sys}
		}
		return res, nil
	case store.OpDeleteBranch:
		res := store.DeleteResult{LastSequence: j.Last}
		if j.BranchID != nil {
			res.BranchID = *j.BranchID
		}
		return res, nil
	}
	res := store.WriteResult{Index: j.Index, Head: j.Head}
	var err error
	if res.Message, err = j.Message.decode(); err != nil {
		return nil, err
	}
	if j.Updated != nil {
		u, err := j.Updated.decode()
		if err != nil {
			return nil, err
		}
		res.Updated = &u
	}
	return res, nil
}

// Recall returns a remembered result (Store.Recall).
func (s *Store) Recall(ctx context.Context, principal string, branchID *uuid.UUID, op store.Op, requestID string) (any, bool, error) {
	if requestID == "" {
		return nil, false, nil
	}
	if err := s.usable(); err != nil {
		return nil, false, err
	}
	scope := creatorScope(principal)
	switch {
	case op == store.OpDeleteBranch:
		if branchID == nil {
			return nil, false, nil
		}
		scope = deleteScope(*branchID)
	case branchID != nil:
		var inc uuid.UUID
		err := s.pool.QueryRow(ctx, qIncarnation, *branchID).Scan(&inc)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil // an unknown branch remembers nothing; the call itself reports it
		}
		if err != nil {
			return nil, false, s.fault(ctx, err)
		}
		scope = branchScope(inc)
	}
	r, ok, err := s.recall(ctx, s.pool, scope, op, requestID)
	return r, ok, s.fault(ctx, err)
}
