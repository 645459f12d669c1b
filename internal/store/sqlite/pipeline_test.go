package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// TestAddMessageAsyncOneCommitPerWindow: issue 21 "an item is answered once it is as durable as a
// unary AddMessage would be, so group commit can take a whole window per fsync": 64 writes queued
// with AddMessageAsync on one branch, without waiting, apply in the order queued and commit in one
// transaction (one fsync with --sync=full), where 64 AddMessage calls one after another commit 64
// times.
func TestAddMessageAsyncOneCommitPerWindow(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	b := emptyBranch(t, s)
	ctx := context.Background()

	release, done := holdWriter(t, s) // so that the window is queued whole before it runs
	before := s.w.commits.Load()
	waits := make([]func() (store.WriteResult, error), 64)
	for i := range waits {
		waits[i] = s.AddMessageAsync(ctx, b, addInput(fmt.Sprint(i)), store.WriteOptions{})
	}
	close(release)
	<-done
	for i, wait := range waits {
		res, err := wait()
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if res.Head != uint64(i+2) || res.Index != i { // BRANCH_CREATED is 1
			t.Fatalf("item %d: head %d index %d, want %d and %d: the queue's order is the branch's", i, res.Head, res.Index, i+2, i)
		}
	}
	if n := s.w.commits.Load() - before; n != 2 { // the holding job's and the window's
		t.Errorf("%d commits for the held job and 64 queued writes, want 2", n)
	}

	before = s.w.commits.Load()
	for i := range 8 {
		if _, err := s.AddMessage(ctx, b, addInput(fmt.Sprint("sync", i)), store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.w.commits.Load() - before; n != 8 {
		t.Errorf("%d commits for 8 writes one after another, want 8 (the test's contrast)", n)
	}
}
