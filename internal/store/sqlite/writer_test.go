package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store/storetest"
)

func insert(key string) func(_ context.Context, tx *sql.Tx) error {
	return func(_ context.Context, tx *sql.Tx) error {
		_, err := tx.Exec("INSERT INTO store_meta (key, value) VALUES (?, 'v')", key)
		return err
	}
}

func keys(t *testing.T, db *DB) map[string]bool {
	t.Helper()
	rows, err := db.read.Query("SELECT key FROM store_meta")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out[k] = true
	}
	return out
}

// issue 14: "Concurrent writers share fsyncs (group commit)": writes that
// wait while a transaction runs are committed together, in one.
func TestGroupCommit(t *testing.T) {
	db := openT(t, Config{})
	w, err := newWriter(context.Background(), db, 0, checkpointHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	ctx := context.Background()

	running, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := w.do(ctx, func(_ context.Context, tx *sql.Tx) error {
			close(running)
			<-release
			return insert("blocker")(context.Background(), tx)
		}, nil)
		if err != nil {
			t.Error(err)
		}
	}()
	<-running
	const n = 10
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.do(ctx, insert(fmt.Sprint("k", i)), nil); err != nil {
				t.Error(err)
			}
		}()
	}
	for len(w.reqs) < n { // queued behind the blocker; no sleep, the writer is held
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if c, wr := w.commits.Load(), w.writes.Load(); c != 2 || wr != n+1 {
		t.Fatalf("commits %d, writes %d; want 2 commits for %d writes", c, wr, n+1)
	}
	if got := keys(t, db); len(got) != n+1 {
		t.Fatalf("%d rows, want %d", len(got), n+1)
	}
}

// A write that fails inside a batch is rolled back alone: the batch's
// other writes commit, and after functions run only for those, in order.
func TestGroupCommitFailureIsolated(t *testing.T) {
	db := openT(t, Config{})
	w, err := newWriter(context.Background(), db, 0, checkpointHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	ctx := context.Background()
	boom := errors.New("boom")

	running, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- w.do(ctx, func(_ context.Context, tx *sql.Tx) error { close(running); <-release; return nil }, nil)
	}()
	<-running
	var mu sync.Mutex
	var after []string
	jobs := []struct {
		key  string
		fail bool
	}{{"a", false}, {"b", true}, {"c", false}}
	results := make([]chan error, len(jobs))
	for i, j := range jobs {
		results[i] = make(chan error, 1)
		fn := insert(j.key)
		if j.fail {
			fn = func(_ context.Context, tx *sql.Tx) error {
				if err := insert(j.key)(context.Background(), tx); err != nil {
					return err
				}
				return boom
			}
		}
		go func() {
			results[i] <- w.do(ctx, fn, func() { mu.Lock(); after = append(after, j.key); mu.Unlock() })
		}()
		for len(w.reqs) < i+1 { // queue them in this order
			runtime.Gosched()
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, j := range jobs {
		err := <-results[i]
		if j.fail != errors.Is(err, boom) || (!j.fail && err != nil) {
			t.Fatalf("%s: err = %v", j.key, err)
		}
	}
	if got := keys(t, db); !got["a"] || got["b"] || !got["c"] {
		t.Fatalf("rows %v: want a and c, not b", got)
	}
	if fmt.Sprint(after) != "[a c]" {
		t.Fatalf("after ran for %v, want [a c]", after)
	}
	if c := w.commits.Load(); c != 2 {
		t.Fatalf("commits %d, want 2", c)
	}
}

// The writer's stop path: close answers, and later writes are ErrClosed.
func TestWriterClose(t *testing.T) {
	db := openT(t, Config{})
	w, err := newWriter(context.Background(), db, 0, checkpointHooks{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.do(context.Background(), insert("x"), nil); err != nil {
		t.Fatal(err)
	}
	w.close()
	w.close()
	if err := w.do(context.Background(), insert("y"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("do after close = %v, want ErrClosed", err)
	}
}

// issue 15 (review: "after the writer takes the only write connection, any
// later use of db.write blocks forever"): newWriter waits for the write
// connection no longer than its ctx; once the writer has it, the pool is
// not there to use (db.write is nil, a second writer is refused at once,
// a write statement outside the writer's transaction fails), and Close
// still closes it.
func TestWriterOwnsTheWriteConnection(t *testing.T) {
	ctx := context.Background()
	db := openT(t, Config{})
	held, err := db.write.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if w, err := newWriter(short, db, 0, checkpointHooks{}); !errors.Is(err, context.DeadlineExceeded) {
		if w != nil {
			w.close()
		}
		t.Fatalf("newWriter while the connection is held: %v, want its ctx's deadline", err)
	}
	held.Close()
	w, err := newWriter(ctx, db, 0, checkpointHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if db.write != nil {
		t.Error("db.write still usable after the writer took its connection")
	}
	if _, err := newWriter(ctx, db, 0, checkpointHooks{}); err == nil {
		t.Error("a second writer took the write connection")
	}
	if err := w.do(ctx, insert("k"), nil); err != nil {
		t.Fatal(err)
	}
}

// issue 15 (review): the store's write statements used outside the
// writer's transaction fail at once instead of waiting forever for the
// connection the writer holds.
func TestWriteStatementOutsideWriterFails(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.wst.exec(ctx, nil, qUnmarkDead, "x"); !errors.Is(err, errWriteOutsideWriter) {
		t.Fatalf("a write statement on the write pool: %v, want %v", err, errWriteOutsideWriter)
	}
}
