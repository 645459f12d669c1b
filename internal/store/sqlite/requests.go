package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// The idempotency records (docs/design.md#idempotency, ADR-0010) in the
// requests table, so that a repeated request id after a restart, within
// the window, returns the first response and writes nothing. The scopes
// are store.Memory's: a principal's branch-creating calls, a branch
// incarnation's writes, a branch id's deletes (sqlrow.CreatorScope,
// BranchScope, DeleteScope), and a record read answers as sqlrow.Record
// says, on both engines. A record is forgotten past
// the window's age (RequestTTL) or past its scope's last RequestMax ids,
// never by another scope's traffic.

// recall returns the result remembered for requestID in scope, if it is
// within the window; an id another op used is ErrRequestIDReused.
func (s *Store) recall(ctx context.Context, c *stmtCache, tx *sql.Tx, scope string, op store.Op, requestID string) (any, bool, error) {
	if requestID == "" {
		return nil, false, nil
	}
	var r sqlrow.Record
	err := c.queryRow(ctx, tx, qRequest,
		scope, requestID).Scan(&r.Op, &r.At, &r.Result)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return r.Recall(codec, op, requestID, s.now().UnixNano(), s.cfg.RequestTTL)
}

// remember records a successful write's result under its request id (in
// the write's transaction), forgetting its scope's oldest id past the
// bound and every id past the window.
// known, when not nil, gives the text of a result's message the write
// already encoded to store it (rowjson.EncodeResultKnown).
func (s *Store) remember(ctx context.Context, tx *sql.Tx, scope string, op store.Op, requestID string, result any,
	known func(*envelope.Message) (string, bool)) error {
	if requestID == "" {
		return nil
	}
	text, err := rowjson.EncodeResultKnown(result, known)
	if err != nil {
		return err
	}
	now := s.now().UnixNano()
	n, ok := s.requests.last[scope]
	if !ok {
		if err := s.wst.queryRow(ctx, tx, qRequestLast, scope).Scan(&n); err != nil {
			return err
		}
	}
	n++
	if _, err := s.wst.exec(ctx, tx, qRemember, scope, requestID, string(op), n, now, text); err != nil {
		return err
	}
	// The scope's ids are numbered from 1: until the bound is passed, no
	// id is old enough to forget.
	if n > int64(s.cfg.RequestMax) {
		if _, err := s.wst.exec(ctx, tx, qForgetOldest, scope, n-int64(s.cfg.RequestMax)); err != nil {
			return err
		}
	}
	if s.requests.expireDue(now) {
		if _, err := s.wst.exec(ctx, tx, qForgetExpired, now-int64(s.cfg.RequestTTL)); err != nil {
			return err
		}
	}
	// Last, once nothing of the record can fail: a write under a
	// savepoint whose statement failed here is rolled back alone while
	// its batch commits, and the book must not count the record it undid.
	// Nothing a write does after remember can fail.
	s.requests.keep(scope, n)
	return nil
}

// forgetScope forgets every id of a scope (a deleted branch's writes; the
// deletes of an id a new branch takes).
func (s *Store) forgetScope(ctx context.Context, tx *sql.Tx, scope string) error {
	delete(s.requests.last, scope)
	_, err := s.wst.exec(ctx, tx, qForgetScope, scope)
	return err
}

// requestBook is what the writer knows of the requests table without
// asking it (issue 21: a write with a request id cost 2.4 times one
// without, in BenchmarkAddMessageRequestIDs; of the five statements the
// record added, the read of the scope's last number and the two deletes
// ran on every write, and the deletes almost never deleted anything).
type requestBook struct {
	// last is the number of each scope's newest record, as qRequestLast
	// read it, or more once the expired records forgotten included the
	// newest (numbers only have to increase): the writer alone numbers
	// them.
	last map[string]int64
	// expired is when (the store's clock, unix nanoseconds) the expired
	// records were last forgotten; ran is false until they first were.
	expired int64
	ran     bool
}

// maxBookScopes bounds requestBook.last, as maxCachedRows bounds the rows.
const maxBookScopes = 4096

// expireEvery is how often the writer forgets the records past the window.
// Forgetting only frees space: recall checks a record's age itself, so an
// expired record is never answered while it waits for this.
const expireEvery = time.Second

// keep notes n as the number of scope's newest record.
func (b *requestBook) keep(scope string, n int64) {
	if _, ok := b.last[scope]; !ok && len(b.last) >= maxBookScopes {
		clear(b.last)
	}
	b.last[scope] = n
}

// expireDue reports whether the expired records are to be forgotten at now,
// and if so notes that they are.
func (b *requestBook) expireDue(now int64) bool {
	if b.ran && now >= b.expired && now-b.expired < int64(expireEvery) {
		return false
	}
	b.expired, b.ran = now, true
	return true
}

// reset forgets what the book knows: the transaction that wrote it was
// rolled back.
func (b *requestBook) reset() {
	clear(b.last)
	b.ran = false
}

// Recall returns a remembered result (Store.Recall). Its reads run on the
// read pool outside s.read, so their errors are sorted here (s.fault): a
// damaged or unreadable file is DATA_LOSS or UNAVAILABLE and reaches the
// store's health, not INTERNAL.
func (s *Store) Recall(ctx context.Context, principal string, branchID *uuid.UUID, op store.Op, requestID string) (any, bool, error) {
	r, ok, err := s.recallOutside(ctx, principal, branchID, op, requestID)
	return r, ok, s.fault(err)
}

func (s *Store) recallOutside(ctx context.Context, principal string, branchID *uuid.UUID, op store.Op, requestID string) (any, bool, error) {
	if requestID == "" {
		return nil, false, nil
	}
	scope, ok, err := sqlrow.RecallScope(principal, branchID, op, func(branch uuid.UUID) (uuid.UUID, bool, error) {
		var inc []byte
		err := s.rst.queryRow(ctx, nil, qIncarnation, blob(branch)).Scan(&inc)
		if errors.Is(err, sql.ErrNoRows) {
			return uuid.UUID{}, false, nil
		}
		if err != nil {
			return uuid.UUID{}, false, err
		}
		id, err := toUUID(inc)
		return id, err == nil, err
	})
	if err != nil || !ok {
		return nil, false, err
	}
	return s.recall(ctx, &s.rst, nil, scope, op, requestID)
}
