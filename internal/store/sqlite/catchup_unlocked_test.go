package sqlite

import (
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// "The writer never waits for a watcher" (docs/decisions/0005, 0015): a
// subscription catching up reads the event log from the read pool, which
// long reads (an export, a ToChatMessages of a big branch) can hold for as
// long as they run. It used to wait for a connection under its branch's
// read lock, and the writer, which publishes each commit under that lock,
// waited with it: every write of the store, to any branch, stalled behind
// one catching-up watcher (a review's find). Here the one read connection
// is held while a subscriber waits for it; writes to its branch and to
// another must be acknowledged meanwhile, and the subscriber, once the
// connection is free, must still deliver every commit in order.
func TestCatchingUpWatcherDoesNotHoldTheWriter(t *testing.T) {
	s := newTestStoreWith(t, storetest.Options{}, func(c *StoreConfig) { c.Readers = 1 })
	ctx := tctx(t)
	a, b := emptyBranch(t, s), emptyBranch(t, s)
	for range 5 {
		if _, err := s.AddMessage(ctx, a, addInput("x"), store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	zero := uint64(0)
	sub, err := s.Subscribe(ctx, a, store.SubscribeInput{After: &zero})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	conn, err := s.db.read.Conn(ctx) // the long read
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = conn.Close()
		}
	}
	defer release()
	waits := s.db.read.Stats().WaitCount
	type next struct {
		c   store.Commit
		err error
	}
	first := make(chan next, 1)
	go func() { c, err := sub.Next(ctx); first <- next{c, err} }()
	for deadline := time.Now().Add(10 * time.Second); s.db.read.Stats().WaitCount == waits; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("the subscriber never asked for a read connection")
		}
	}

	for i, id := range []uuid.UUID{a, b} {
		name := [...]string{"its branch", "another branch"}[i]
		done := make(chan error, 1)
		go func() {
			_, err := s.AddMessage(ctx, id, addInput("while the watcher waits"), store.WriteOptions{})
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("write to %s: %v", name, err)
			}
		case <-time.After(10 * time.Second): // a failure bound, not synchronisation
			release()
			t.Fatalf("a write to %s waited 10 s for a watcher waiting for a read connection", name)
		}
	}

	release()
	got := <-first
	if got.err != nil || got.c[0].Sequence != 1 {
		t.Fatalf("first commit after the connection was freed = %+v, %v; want sequence 1", got.c, got.err)
	}
	for want := uint64(2); want <= 7; want++ {
		c, err := sub.Next(ctx)
		if err != nil || c[0].Sequence != want {
			t.Fatalf("commit %d = %+v, %v", want, c, err)
		}
	}
}
