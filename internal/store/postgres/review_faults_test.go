package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/storetest"
)

// Issue 16 review, finding 5: the migrations run with statement_timeout 0,
// whatever --postgres-statement-timeout says: a migration statement longer
// than it must not fail Open (57014). 1 ms is shorter than creating the
// schema's tables.
func TestReviewMigrationIgnoresStatementTimeout(t *testing.T) {
	cfg := testConfig(pgtest.New(t), storetest.Options{})
	cfg.StatementTimeout = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open with a 1ms statement timeout: %v", err)
	}
	defer s.Close()
	if !s.ready.Load() {
		_, why := s.Health()
		t.Fatalf("Open returned a Store still connecting: %v", why)
	}
}

// Issue 16 review, finding 5: only the ping is bounded by connectTimeout;
// a migration that outlasts it (here: waiting for another replica's
// migration lock, which by design waits minutes) completes within Open.
func TestReviewMigrationNotBoundByConnectTimeout(t *testing.T) {
	u := pgtest.New(t)
	first := openReady(t, testConfig(u, storetest.Options{}))
	id, err := lockID(tctx(t), first.pool)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := first.pool.Acquire(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(tctx(t), `SELECT pg_advisory_lock($1)`, id); err != nil {
		t.Fatal(err)
	}
	old := connectTimeout
	connectTimeout = 200 * time.Millisecond
	defer func() { connectTimeout = old }()
	type res struct {
		s   *Store
		err error
	}
	done := make(chan res, 1)
	go func() {
		s, err := Open(context.Background(), testConfig(u, storetest.Options{}))
		done <- res{s, err}
	}()
	// The scenario's length, not a synchronisation: the lock is held for
	// several times the connect bound (goose probes it every second).
	select {
	case r := <-done:
		if r.s != nil {
			r.s.Close()
		}
		t.Fatalf("Open returned while the migration lock was held: %v", r.err)
	case <-time.After(1500 * time.Millisecond):
	}
	if _, err := conn.Exec(tctx(t), `SELECT pg_advisory_unlock($1)`, id); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.s.Close()
	if _, why := r.s.Health(); why != nil || !r.s.ready.Load() {
		t.Fatalf("after the lock was released, the Store is not ready: %v", why)
	}
}

// Issue 16 review, finding 6: the message every call and Health carry
// while the server is unreachable names Target() and a short cause, never
// pgconn's text (the user, the database, the dialled addresses); the full
// cause is LogCause, for the server's log.
func TestReviewUnreachableMessageHidesInternals(t *testing.T) {
	u, _ := viaProxy(t) // never up: refused
	s := openTest(t, testConfig(u, storetest.Options{}))
	_, err := s.Health()
	var se *StorageError
	if !errors.As(err, &se) {
		t.Fatalf("health: %v", err)
	}
	msg := se.Error()
	for _, leak := range []string{"user=", "database=", "failed to connect", "dial"} {
		if strings.Contains(msg, leak) {
			t.Errorf("the client's message %q carries %q", msg, leak)
		}
	}
	if !strings.Contains(msg, s.Target()) || !strings.Contains(msg, "connection refused") {
		t.Errorf("the client's message %q does not name the target and the cause class", msg)
	}
	if !strings.Contains(se.LogCause().Error(), "user=") {
		t.Errorf("the log cause %q lost pgconn's detail", se.LogCause())
	}
	refused := &StorageError{Target: s.Target(), Err: store.ErrStorageUnavailable, Refused: true,
		Cause: &pgconn.PgError{Code: "28P01", Message: `password authentication failed for user "alice"`}}
	if strings.Contains(refused.Error(), "alice") {
		t.Errorf("a refused connection's message %q names the user", refused.Error())
	}
}

// Issue 16 review, finding 7: SQLSTATEs a failover, the server's trouble
// or contention produce are retryable (UNAVAILABLE), not INTERNAL. A
// failover (25006: the server is a standby now; 57P04: the database
// dropped) and an I/O error mark the health unusable until the prober
// reaches a writable primary; a lock timeout, out of memory and a
// deadlock left after the retries do not: the server is fine.
func TestReviewStorageClassMore(t *testing.T) {
	for _, tc := range []struct {
		code     string
		unusable bool
	}{
		{"25006", true},  // read_only_sql_transaction: a standby after failover
		{"57P04", true},  // database_dropped
		{"58030", true},  // io_error
		{"53200", false}, // out_of_memory
		{"55P03", false}, // lock_not_available
		{"40P01", false}, // deadlock_detected, after runTx's retries
		{"40001", false}, // serialization_failure, after runTx's retries
	} {
		err := &pgconn.PgError{Code: tc.code}
		if got := storageClass(err); got != store.ErrStorageUnavailable {
			t.Errorf("%s: class %v, want ErrStorageUnavailable", tc.code, got)
		}
		if got := marksUnusable(err); got != tc.unusable {
			t.Errorf("%s: marks the health unusable %v, want %v", tc.code, got, tc.unusable)
		}
	}
}

// A remembered result (requests.result) that does not decode is a row
// historyd wrote and cannot read back: DATA_LOSS (damagedRowError), as a
// message row that does not decode is, not INTERNAL.
func TestARememberedResultThatDoesNotDecodeIsDamage(t *testing.T) {
	storetest.RememberedResultDamage(t,
		func(t *testing.T) store.Store { return openReady(t, testConfig(pgtest.New(t), storetest.Options{})) },
		func(t *testing.T, st store.Store, op store.Op, text string) store.Store {
			tag, err := st.(*Store).pool.Exec(tctx(t), `UPDATE requests SET result = $1 WHERE op = $2`, text, string(op))
			if err != nil {
				t.Fatal(err)
			}
			if tag.RowsAffected() != 1 {
				t.Fatalf("%d records of %s, want 1", tag.RowsAffected(), op)
			}
			return st
		}, nil)
}
