package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/storetest"
)

// The fault classes of ADR-0017 (issue 16 "Faults"), by SQLSTATE.
func TestStorageClass(t *testing.T) {
	for _, tc := range []struct {
		code string
		want error
		conn bool
	}{
		{"57P01", store.ErrStorageUnavailable, true}, // admin shutdown
		{"57P02", store.ErrStorageUnavailable, true},
		{"57P03", store.ErrStorageUnavailable, true},
		{"08006", store.ErrStorageUnavailable, true},  // connection failure
		{"53300", store.ErrStorageUnavailable, true},  // too many connections
		{"57014", store.ErrStorageUnavailable, false}, // statement timeout: retryable, the server is fine
		{"53100", store.ErrStorageFull, false},
		{"XX001", store.ErrStorageDamaged, false},
		{"XX002", store.ErrStorageDamaged, false},
		{"23505", nil, false},
		{"40P01", store.ErrStorageUnavailable, false}, // after runTx's retries (issue 16 review 7)
	} {
		err := &pgconn.PgError{Code: tc.code}
		if got := storageClass(err); got != tc.want {
			t.Errorf("%s: class %v, want %v", tc.code, got, tc.want)
		}
		if got := connectionClass(err); got != tc.conn {
			t.Errorf("%s: connection class %v, want %v", tc.code, got, tc.conn)
		}
	}
	if !connectionClass(commitError{errors.New("read: connection reset")}) {
		t.Error("a COMMIT without an answer is not of the connection class")
	}
	if connectionClass(context.Canceled) {
		t.Error("the caller's cancellation is of the connection class")
	}
}

// StatementTimeout becomes the sessions' statement_timeout, and a
// statement it cancels is ErrStorageUnavailable without marking the store
// unusable.
func TestStatementTimeout(t *testing.T) {
	cfg := testConfig(pgtest.New(t), storetest.Options{})
	cfg.StatementTimeout = 50 * time.Millisecond
	s := openReady(t, cfg)
	var v string
	if err := s.pool.QueryRow(tctx(t), "SHOW statement_timeout").Scan(&v); err != nil || v != "50ms" {
		t.Fatalf("statement_timeout = %q, %v; want 50ms", v, err)
	}
	_, err := s.pool.Exec(tctx(t), "SELECT pg_sleep(1)")
	err = s.fault(tctx(t), err)
	if !errors.Is(err, store.ErrStorageUnavailable) {
		t.Fatalf("a statement past the timeout: %v, want ErrStorageUnavailable", err)
	}
	if _, unusable := s.Health(); unusable != nil {
		t.Fatalf("a statement timeout made the store unusable: %v", unusable)
	}
}
