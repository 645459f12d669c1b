package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// Migrate against a server that accepts the connection and never answers failed to return at all
// (`historyd migrate --store postgres` hung); its connect is now bounded as Open's is, and the
// error names the server (never the password) and the bound.
func TestMigrateBoundsTheConnect(t *testing.T) {
	addr, _ := pgtest.SilentServer(t)
	old := connectTimeout
	connectTimeout = 300 * time.Millisecond
	defer func() { connectTimeout = old }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the hang, were it back
	defer cancel()
	_, err := Migrate(ctx, "postgres://historyd:s3cret@"+addr+"/historyd?sslmode=disable")
	if ctx.Err() != nil {
		t.Fatalf("Migrate waited for the test's own deadline: %v", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr+"/historyd") ||
		!strings.Contains(err.Error(), "300ms") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Migrate against a silent server = %v; want a deadline naming %s and 300ms, without the password", err, addr)
	}
}

// Migrate waits for a migration lock another session holds (up to migrations.LockWait); it says
// so first, naming the holder, through OnLockWait, and not when the lock is free.
func TestMigrateSaysWhatItWaitsFor(t *testing.T) {
	ctx := tctx(t)
	noticeAfter(t, 50*time.Millisecond)
	u, pid, release := pgtest.HoldMigrationLock(ctx, t, "the-holder")
	waiting := make(chan LockHolder, 1)
	type result struct {
		applied []int64
		err     error
	}
	done := make(chan result, 1)
	go func() {
		applied, err := Migrate(ctx, u, OnLockWait(func(h LockHolder) { waiting <- h }))
		done <- result{applied, err}
	}()
	select {
	case h := <-waiting:
		if h.PID != pid || h.Application != "the-holder" || h.Client == "" || h.Since.IsZero() {
			t.Errorf("waiting for %+v, want pid %d, application the-holder", h, pid)
		}
	case r := <-done:
		t.Fatalf("Migrate returned %v, %v while the lock was held", r.applied, r.err)
	}
	release()
	if r := <-done; r.err != nil || len(r.applied) == 0 {
		t.Fatalf("Migrate once the lock was free = %v, %v", r.applied, r.err)
	}
	// Free: nothing to say.
	if _, err := Migrate(ctx, u, OnLockWait(func(h LockHolder) { t.Errorf("waiting for a free lock: %+v", h) })); err != nil {
		t.Fatal(err)
	}
}

// Every start takes the migration lock, if only to read the schema's version, so replicas
// starting together each see the others hold it for a moment: a wait shorter than
// lockWaitNotice is not reported (a review counted 8 warnings in 20 starts of 4 replicas on a
// current schema, each saying another was migrating).
func TestMigrateSaysNothingOfAShortWait(t *testing.T) {
	ctx := tctx(t)
	noticeAfter(t, time.Minute) // far longer than the hold below, on any machine
	// Held when the migration starts, let go before its first try.
	u, _, release := pgtest.HoldMigrationLock(ctx, t, "the-holder")
	hookBeforeUp = release
	t.Cleanup(func() { hookBeforeUp = nil })
	if _, err := Migrate(ctx, u, OnLockWait(func(h LockHolder) { t.Errorf("a short wait reported: %+v", h) })); err != nil {
		t.Fatal(err)
	}
}

// lockHolder does not report this process's own migration session, which holds the lock while
// it migrates: that is no one else's migration to wait for.
func TestLockHolderIsNotThisProcess(t *testing.T) {
	base := pgtest.URL(t)
	schema := pgtest.Schema(t, base)
	ctx := tctx(t)
	pool, err := migrationPool(ctx, pgtest.SchemaURL(t, base, schema))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id, err := lockID(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", id)
	if h, held, err := lockHolder(ctx, pool, id); err != nil || held {
		t.Errorf("lockHolder with this process's session holding the lock = %+v, %v, %v; want none", h, held, err)
	}
}

// noticeAfter sets lockWaitNotice for the test.
func noticeAfter(t *testing.T, d time.Duration) {
	was := lockWaitNotice
	lockWaitNotice = d
	t.Cleanup(func() { lockWaitNotice = was })
}
