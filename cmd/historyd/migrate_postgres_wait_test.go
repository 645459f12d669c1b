package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// TestMigratePostgresNoAnswer: `historyd migrate --store postgres` against a server that accepts
// the connection and never answers hung forever; it now gives up after the connect bound serving
// uses (10 s), exit 1, one line naming the server and the bound, never the password.
func TestMigratePostgresNoAnswer(t *testing.T) {
	addr, _ := pgtest.SilentServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // the hang, were it back
	defer cancel()
	var stdout, stderr strings.Builder
	code := runIO(ctx, signals{}, []string{"migrate", "--store", "postgres", "--postgres-url", "postgres://historyd:s3cret@" + addr + "/historyd?sslmode=disable"},
		envOf(nil), &stdout, &stderr)
	if ctx.Err() != nil {
		t.Fatalf("migrate waited for the test's own deadline: %d, %q", code, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], addr+"/historyd did not answer within 10s") || strings.Contains(lines[0], "s3cret") {
		t.Errorf("migrate against a silent server = %d, %q; want 1 and one line naming %s and the 10s bound, without the password", code, stderr.String(), addr)
	}
}

// lineSignal is a writer that closes a channel once what was written contains a string it waits
// for (seen).
type lineSignal struct {
	mu      sync.Mutex
	buf     strings.Builder
	waiters map[string]chan struct{}
}

func (w *lineSignal) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.wake()
	return len(p), nil
}

// seen returns a channel closed once what was written contains want.
func (w *lineSignal) seen(want string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters == nil {
		w.waiters = map[string]chan struct{}{}
	}
	if _, ok := w.waiters[want]; !ok {
		w.waiters[want] = make(chan struct{})
		w.wake()
	}
	return w.waiters[want]
}

// wake closes the channels of the strings written by now; w.mu is held.
func (w *lineSignal) wake() {
	for want, ch := range w.waiters {
		if strings.Contains(w.buf.String(), want) {
			close(ch)
			delete(w.waiters, want)
		}
	}
}

func (w *lineSignal) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestMigratePostgresSaysWhatItWaitsFor: while another session holds the schema's migration lock,
// migrate (which waits for it up to 5 minutes) says so on stderr first, naming the holder, then
// migrates once the lock is free.
func TestMigratePostgresSaysWhatItWaitsFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	target, _, release := pgtest.HoldMigrationLock(ctx, t, "the-holder")

	stderr := &lineSignal{}
	waiting := stderr.seen("waiting up to 5m0s for the migration lock")
	var stdout strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- runIO(ctx, signals{}, []string{"migrate", "--store", "postgres", "--postgres-url", target}, envOf(nil), &stdout, stderr)
	}()
	select {
	case <-waiting:
	case code := <-done:
		t.Fatalf("migrate = %d while the lock was held, stderr %q", code, stderr.String())
	case <-ctx.Done():
		t.Fatalf("migrate said nothing while it waited for the lock: stderr %q", stderr.String())
	}
	if line := stderr.String(); !strings.Contains(line, `"the-holder"`) || !strings.Contains(line, "PostgreSQL "+postgresTarget(target)) {
		t.Errorf("the waiting line %q does not name the holder and the database", line)
	}
	release()
	if code := <-done; code != 0 || !strings.Contains(stdout.String(), "applied migration 1") {
		t.Errorf("migrate once the lock was free = %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// TestServePostgresSaysWhatItWaitsFor: a replica starting while another session holds the schema's
// migration lock waited for it (up to 5 minutes) without a word, looking hung; it now logs one
// warning naming the holder first, then serves once the lock is free.
func TestServePostgresSaysWhatItWaitsFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	target, pid, release := pgtest.HoldMigrationLock(ctx, t, "the-holder")

	log := &lineSignal{}
	waiting, serving := log.seen("for the PostgreSQL migration lock"), log.seen(`"msg":"serving"`)
	stop, stopServing := context.WithCancel(ctx)
	defer stopServing()
	done := make(chan int, 1)
	go func() {
		done <- run(stop, []string{"--listen", "127.0.0.1:0", "--store", "postgres", "--postgres-url", target, "--postgres-max-conns", "2"}, envOf(nil), log)
	}()
	select {
	case <-waiting:
	case code := <-done:
		t.Fatalf("serve = %d while the lock was held, log %q", code, log.String())
	case <-ctx.Done():
		t.Fatalf("serve said nothing while it waited for the lock: log %q", log.String())
	}
	var line struct {
		Level, Msg        string
		HolderPID         int    `json:"holder_pid"`
		HolderApplication string `json:"holder_application"`
		Postgres          string
	}
	first := strings.SplitN(log.String(), "\n", 2)[0]
	if err := json.Unmarshal([]byte(first), &line); err != nil {
		t.Fatalf("the first log line %q: %v", first, err)
	}
	if line.Level != "warn" || !strings.HasPrefix(line.Msg, "waiting up to 5m0s for the PostgreSQL migration lock") ||
		line.HolderPID != pid || line.HolderApplication != "the-holder" || line.Postgres != postgresTarget(target) {
		t.Errorf("the waiting line %q: want a warning naming the holder (pid %d, the-holder) and the database", first, pid)
	}
	release()
	select {
	case <-serving:
	case code := <-done:
		t.Fatalf("serve = %d once the lock was free, log %q", code, log.String())
	case <-ctx.Done():
		t.Fatalf("serve did not serve once the lock was free: log %q", log.String())
	}
	stopServing()
	if code := <-done; code != 0 {
		t.Errorf("serve = %d after its stop, log %q", code, log.String())
	}
}
