package postgres

import (
	"context"
	"errors"
	"hash/fnv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// The idempotency records (docs/design.md#idempotency, ADR-0010) in the
// requests table, as the SQLite engine keeps them (its requests.go; the
// scopes and a record's answer are sqlrow's, for both). A
// branch write recalls its request id after it has locked the branch's
// row, and a branch-creating call after it has taken the advisory lock of
// its scope and id, in the transaction that writes: so the same request_id
// sent to two replicas at once writes once (issue 16).

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
func (s *Store) recalled(row pgx.Row, op store.Op, requestID string) (any, bool, error) {
	var r sqlrow.Record
	err := row.Scan(&r.Op, &r.At, &r.Result)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return r.Recall(codec, op, requestID, s.now().UnixNano(), s.cfg.RequestTTL)
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
	text, err := rowjson.EncodeResult(result)
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

// Recall returns a remembered result (Store.Recall).
func (s *Store) Recall(ctx context.Context, principal string, branchID *uuid.UUID, op store.Op, requestID string) (any, bool, error) {
	if requestID == "" {
		return nil, false, nil
	}
	if err := s.usable(); err != nil {
		return nil, false, err
	}
	scope, ok, err := sqlrow.RecallScope(principal, branchID, op, func(branch uuid.UUID) (uuid.UUID, bool, error) {
		var inc uuid.UUID
		err := s.pool.QueryRow(ctx, qIncarnation, branch).Scan(&inc)
		if errors.Is(err, pgx.ErrNoRows) {
			return uuid.UUID{}, false, nil
		}
		return inc, err == nil, err
	})
	if err != nil || !ok {
		return nil, false, s.fault(ctx, err)
	}
	r, ok, err := s.recall(ctx, s.pool, scope, op, requestID)
	return r, ok, s.fault(ctx, err)
}
