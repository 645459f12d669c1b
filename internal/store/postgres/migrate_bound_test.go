package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store/migrations"
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
	base := pgtest.URL(t)
	schema := pgtest.Schema(t, base)
	u := pgtest.SchemaURL(t, base, schema)
	ctx := tctx(t)
	pid, release := pgtest.HoldAdvisoryLock(ctx, t, base, "the-holder", func(database string) int64 { return migrations.LockID(database, schema) })
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
		if h.PID != pid || h.Application != "the-holder" {
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
