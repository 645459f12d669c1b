package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// fakeStorage is a store whose storage health the test sets, as the sqlite engine's Health
// reports it.
type fakeStorage struct {
	*store.Memory
	mu       sync.Mutex
	unusable error
	changed  chan struct{}
}

func (f *fakeStorage) Health() (<-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed, f.unusable
}

func (f *fakeStorage) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unusable = err
	close(f.changed)
	f.changed = make(chan struct{})
}

// healthStream is a Health/Watch stream in process: it hands each status sent to the test.
type healthStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan healthpb.HealthCheckResponse_ServingStatus
}

func (w *healthStream) Context() context.Context { return w.ctx }
func (w *healthStream) Send(m *healthpb.HealthCheckResponse) error {
	w.sent <- m.GetStatus()
	return nil
}

// TestHealthFollowsStorage: issue 15 "the engine's health joins the health service (NOT_SERVING
// when the database is unusable)": the overall and the HistoryService statuses go NOT_SERVING
// when the store says its storage is unusable, SERVING again when it recovers, and stay
// NOT_SERVING after shutdown.
func TestHealthFollowsStorage(t *testing.T) {
	srv := New(nil)
	st := &fakeStorage{Memory: store.NewMemory(), changed: make(chan struct{})}
	RegisterHistory(srv, st)
	var streams []*healthStream
	var wg sync.WaitGroup
	for _, name := range []string{"", historyv1.HistoryService_ServiceDesc.ServiceName} {
		ws := &healthStream{ctx: testContext(t), sent: make(chan healthpb.HealthCheckResponse_ServingStatus, 16)}
		streams = append(streams, ws)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = srv.health.Watch(&healthpb.HealthCheckRequest{Service: name}, ws)
		}()
	}
	expect := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for i, ws := range streams {
			select {
			case got := <-ws.sent:
				if got != want {
					t.Fatalf("stream %d: %v, want %v", i, got, want)
				}
			case <-testContext(t).Done():
				t.Fatalf("stream %d: no status, want %v", i, want)
			}
		}
	}
	expect(healthpb.HealthCheckResponse_SERVING)
	st.set(errors.New("database file x is unavailable: disk I/O error"))
	expect(healthpb.HealthCheckResponse_NOT_SERVING)
	st.set(nil)
	expect(healthpb.HealthCheckResponse_SERVING)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect(healthpb.HealthCheckResponse_NOT_SERVING)
	wg.Wait()
	st.set(nil) // after shutdown: ignored
	resp, err := srv.Health().Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after shutdown: %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
}

// TestHealthNotServingFromTheStart: issue 16 "PostgreSQL unreachable at start: historyd retries
// with backoff, health NOT_SERVING until it connects": a store unusable when the service is
// registered answers NOT_SERVING (overall and HistoryService) to the very first Check, with no
// window of SERVING before the follower's goroutine has run (the e2e test saw one).
func TestHealthNotServingFromTheStart(t *testing.T) {
	srv := New(nil)
	st := &fakeStorage{Memory: store.NewMemory(), changed: make(chan struct{}), unusable: errors.New("PostgreSQL at h:5432/db unreachable; retrying")}
	RegisterHistory(srv, st)
	for _, name := range []string{"", historyv1.HistoryService_ServiceDesc.ServiceName} {
		resp, err := srv.Health().Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health of %q right after RegisterHistory over an unusable store: %v, %v; want NOT_SERVING", name, resp.GetStatus(), err)
		}
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Review of issue 15, defect 3: an I/O error that the next commit clears flips the health at the
// request rate; the log says so once a minute, not once per flip (each flip logged an Error and an
// Info line), and names SQLite's error as the cause.
func TestHealthLogsStorageFlipsOncePerInterval(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	srv := New(zap.New(core))
	st := &fakeStorage{Memory: store.NewMemory(), changed: make(chan struct{})}
	RegisterHistory(srv, st)
	ws := &healthStream{ctx: testContext(t), sent: make(chan healthpb.HealthCheckResponse_ServingStatus, 16)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.health.Watch(&healthpb.HealthCheckRequest{}, ws) }()
	expect := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		select {
		case got := <-ws.sent:
			if got != want {
				t.Fatalf("%v, want %v", got, want)
			}
		case <-testContext(t).Done():
			t.Fatalf("no status, want %v", want)
		}
	}
	expect(healthpb.HealthCheckResponse_SERVING)
	const flips = 20
	for range flips {
		st.set(&causedError{msg: "database file x had an I/O error", cause: errors.New("disk I/O error (10)")})
		expect(healthpb.HealthCheckResponse_NOT_SERVING)
		st.set(nil)
		expect(healthpb.HealthCheckResponse_SERVING)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	down := logs.FilterMessageSnippet("unusable").All()
	up := logs.FilterMessageSnippet("usable again").Len()
	if len(down) != 1 || up != 1 {
		t.Fatalf("%d flips logged %d unusable and %d usable lines, want 1 and 1", flips, len(down), up)
	}
	if cause := down[0].ContextMap()["cause"]; cause != "disk I/O error (10)" {
		t.Fatalf("the unusable line's cause is %v", cause)
	}
}

// causedError is a storage error with a cause for the log only, as the sqlite engine's.
type causedError struct {
	msg   string
	cause error
}

func (e *causedError) Error() string   { return e.msg }
func (e *causedError) LogCause() error { return e.cause }

// Issue 15, health follows the storage: the log must not end on "usable again" while the storage
// is unusable (a change to unusable the rate limit held back is logged once the window ends), and
// damage, which lasts until restart, is logged even inside the window and after an I/O error.
func TestStorageLogNeverEndsOnAStaleState(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	now := time.Unix(0, 0)
	l := &storageLog{logger: zap.New(core), every: time.Minute, now: func() time.Time { return now }}
	ioErr := errors.New("database file x had an I/O error")
	if wait := l.observe(ioErr); wait != 0 {
		t.Fatalf("the first failure waits %v", wait)
	}
	l.observe(nil)
	now = now.Add(time.Second)
	wait := l.observe(ioErr) // inside the window: held back
	if wait != 59*time.Second {
		t.Fatalf("a held-back failure waits %v, want 59s", wait)
	}
	if n := logs.FilterMessageSnippet("unusable").Len(); n != 1 {
		t.Fatalf("%d unusable lines inside the window, want 1", n)
	}
	now = now.Add(wait) // the recheck: still unusable
	if wait := l.observe(ioErr); wait != 0 {
		t.Fatalf("the recheck waits again %v", wait)
	}
	down := logs.FilterMessageSnippet("unusable").All()
	if len(down) != 2 || down[1].ContextMap()["unlogged_failures"] != int64(1) {
		t.Fatalf("after the window: %d unusable lines (%v), want 2, the last counting 1 unlogged", len(down), down)
	}
	damage := fmt.Errorf("database file x is damaged: %w", store.ErrStorageDamaged)
	now = now.Add(time.Second)
	l.observe(damage) // already down with an I/O error, inside the window: damage is news
	if n := logs.FilterMessageSnippet("unusable").Len(); n != 3 {
		t.Fatalf("damage after an I/O error: %d unusable lines, want 3", n)
	}
	l.observe(damage)
	if n := logs.FilterMessageSnippet("unusable").Len(); n != 3 {
		t.Fatalf("damage seen again: %d unusable lines, want still 3", n)
	}
}
