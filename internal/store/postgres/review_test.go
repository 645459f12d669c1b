package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
)

// Tests of the issue 16 review's findings on the engine's subscriptions
// (handles.go, wake.go, subscribe.go). Each forces its scenario through
// the database (rows deleted, a table locked) or the Store's locks, never
// by sleeping.

// nextWithin reads sub's next commit with a deadline: a reader that never
// returns (a loop that ignores ctx) fails the test instead of hanging it.
func nextWithin(t *testing.T, sub *store.Subscription, d time.Duration) (store.Commit, error) {
	t.Helper()
	type res struct {
		c   store.Commit
		err error
	}
	done := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		c, err := sub.Next(ctx)
		done <- res{c, err}
	}()
	select {
	case r := <-done:
		return r.c, r.err
	case <-time.After(d + 5*time.Second):
		t.Fatalf("Next did not return within %v (its ctx's deadline): the reader loops", d+5*time.Second)
		return nil, nil
	}
}

// endOf reads sub until it ends and returns why.
func endOf(t *testing.T, sub *store.Subscription) error {
	t.Helper()
	for {
		if _, err := nextWithin(t, sub, 10*time.Second); err != nil {
			return err
		}
	}
}

// Issue 16 review, finding 1: a subscriber catching up when its branch is
// deleted reads the log the delete left; when the janitor deletes those
// rows (past deadGrace) before it read them, it ends (too slow: it did
// not get BRANCH_DELETED), instead of querying every 10 ms forever.
func TestReviewDeletedBranchReaderEnds(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	br := newBranch(t, s)
	for i := range 4 {
		add(t, s, br, msgText(i), store.WriteOptions{})
	}
	zero := uint64(0)
	sub, err := s.Subscribe(tctx(t), br, store.SubscribeInput{After: &zero})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := s.DeleteBranch(tctx(t), br, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(tctx(t), qDeleteEvents, sub.Incarnation); err != nil { // the janitor, past the grace
		t.Fatal(err)
	}
	err = endOf(t, sub)
	if !errors.Is(err, store.ErrSubscriberTooSlow) {
		t.Fatalf("the reader of a deleted log whose rows are gone ended with %v, want ErrSubscriberTooSlow", err)
	}
}

// Issue 16 review, finding 1: a Subscribe that passed usable() just before
// Close must not register after Close's endAll and then read a closed pool
// forever: it fails ErrClosed, or its subscription ends at once.
func TestReviewSubscribeRacingClose(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	br := newBranch(t, s)
	add(t, s, br, "x", store.WriteOptions{})
	keep, err := s.Subscribe(tctx(t), br, store.SubscribeInput{}) // the handle exists: the racing Subscribe syncs it
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	s.hookBeforeLock = func() { s.Close() } //nolint:errcheck // Close always returns nil
	zero := uint64(0)
	sub, err := s.Subscribe(tctx(t), br, store.SubscribeInput{After: &zero})
	if err != nil {
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("Subscribe racing Close: %v, want ErrClosed", err)
		}
		return
	}
	defer sub.Close()
	if err := endOf(t, sub); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("a subscription registered across Close ended with %v, want ErrClosed", err)
	}
}

// Issue 16 review, finding 2: a write's transaction never waits for the
// Store's handle map lock (s.mu), which a watcher being let go may hold:
// with s.mu held, a write to a watched branch still completes.
func TestReviewWriteNeverWaitsForStoreLock(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	br := newBranch(t, s)
	sub, err := s.Subscribe(tctx(t), br, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s.mu.Lock()
	done := make(chan error, 1)
	go func() {
		_, err := s.AddMessage(context.Background(), br, store.AddInput{Factory: addFactory("x")}, store.WriteOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		s.mu.Unlock()
		<-done
		t.Fatal("a write waited for s.mu (inside its transaction, holding its branch's row lock)")
	}
}

// Issue 16 review, finding 2: letting a handle go never waits for the
// handle's lock while holding s.mu (the lock every write took): with the
// handle locked for writing (as by a publisher), unpin must leave s.mu
// free.
func TestReviewReleaseNeverHoldsStoreLockForHandle(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	br := newBranch(t, s)
	h, _, err := s.pin(tctx(t), br)
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.unpin(h)
	}()
	free := func() bool {
		if !s.mu.TryLock() {
			return false
		}
		defer s.mu.Unlock()
		return h.pins == 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for !free() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // a poll of a condition, with a deadline
	}
	ok := free()
	h.mu.Unlock() // before failing: the Store's Close needs both locks
	<-done
	if !ok {
		t.Fatal("unpin held s.mu while waiting for the handle's lock")
	}
	if _, ok := s.handles.Load(br); ok {
		t.Fatal("the idle handle was kept")
	}
}

// lockEvents takes the events table's ACCESS EXCLUSIVE lock in a
// transaction of its own until the test ends or the returned func runs:
// every read of the events blocks.
func lockEvents(t *testing.T, s *Store) (unlock func()) {
	t.Helper()
	return lockTable(t, s, "events")
}

// lockTable is lockEvents for any table.
func lockTable(t *testing.T, s *Store, table string) (unlock func()) {
	t.Helper()
	conn, err := s.pool.Acquire(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(tctx(t), "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var once bool
	unlock = func() {
		if once {
			return
		}
		once = true
		tx.Rollback(context.Background()) //nolint:errcheck // releases the lock
		conn.Release()
	}
	t.Cleanup(unlock)
	return unlock
}

// behindReplica returns replicas a (the writer) and b (wake-ups dropped,
// no periodic sweep), a branch and a live subscription on b: b's handle
// stays behind a's writes until something advances it.
func behindReplica(t *testing.T, mod func(*Config)) (a, b *Store, br uuid.UUID, sub *store.Subscription) {
	t.Helper()
	rs := replicas(t, 2, func(c *Config) {
		c.SweepInterval = time.Hour
		if mod != nil {
			mod(c)
		}
	})
	a, b = rs[0], rs[1]
	listening(t, a, b)
	b.wake.drop.Store(true)
	br = newBranch(t, a)
	sub, err := b.Subscribe(tctx(t), br, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return a, b, br, sub
}

// Issue 16 review, finding 2: advance reads the events before it takes the
// handle's lock, and locks only to publish: while its read waits (here on
// a table lock; in the review, on a full pool), the handle stays free for
// local acks, the listener and release.
func TestReviewAdvanceReadsOutsideTheLock(t *testing.T) {
	a, b, br, sub := behindReplica(t, nil)
	var head uint64
	for i := range 3 {
		head = add(t, a, br, msgText(i), store.WriteOptions{}).Head
	}
	h := b.handleOf(br, sub.Incarnation)
	if h == nil {
		t.Fatal("no handle on b")
	}
	unlock := lockEvents(t, a)
	done := make(chan error, 1)
	go func() { done <- b.advance(h, head, nil) }()
	waitFor(t, 10*time.Second, "advance's read waiting on the table lock", func() bool {
		var n int
		err := a.pool.QueryRow(tctx(t), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM events%'`).Scan(&n)
		return err == nil && n > 0
	})
	locked := h.mu.TryLock()
	if locked {
		h.mu.Unlock()
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !locked {
		t.Fatal("the handle's lock was held while advance waited for its read")
	}
	expectCommits(t, sub, 1, head, 5*time.Second)
}

// Issue 16 review, finding 3: a Subscribe on b after a acknowledged head N,
// when b's read of the events fails, is ErrStorageUnavailable (retryable),
// never ErrCursorAhead against b's stale log (INVALID_ARGUMENT, not
// retried).
func TestReviewSubscribeReadFailureIsUnavailable(t *testing.T) {
	a, b, br, _ := behindReplica(t, func(c *Config) { c.StatementTimeout = 300 * time.Millisecond })
	var head uint64
	for i := range 3 {
		head = add(t, a, br, msgText(i), store.WriteOptions{}).Head
	}
	lockEvents(t, a)
	sub, err := b.Subscribe(tctx(t), br, store.SubscribeInput{After: &head})
	if err == nil {
		sub.Close()
		t.Fatal("Subscribe succeeded without reading the events")
	}
	if !errors.Is(err, store.ErrStorageUnavailable) || errors.Is(err, store.ErrCursorAhead) {
		t.Fatalf("Subscribe with a cursor acknowledged elsewhere, the read failing: %v, want ErrStorageUnavailable", err)
	}
}

// Issue 16 review, finding 4: a catching-up reader that finds rows of the
// log trimmed ends itself as too slow; the branch's live subscribers,
// which lack nothing, go on.
func TestReviewGapEndsOnlyTheLaggingReader(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	br := newBranch(t, s)
	var head uint64
	for i := range 5 {
		head = add(t, s, br, msgText(i), store.WriteOptions{}).Head
	}
	live, err := s.Subscribe(tctx(t), br, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	zero := uint64(0)
	lagging, err := s.Subscribe(tctx(t), br, store.SubscribeInput{After: &zero})
	if err != nil {
		t.Fatal(err)
	}
	defer lagging.Close()
	// Trimmed by writers elsewhere while this replica lagged.
	if _, err := s.pool.Exec(tctx(t), qTrimEvents, lagging.Incarnation, int64(4)); err != nil {
		t.Fatal(err)
	}
	if err := endOf(t, lagging); !errors.Is(err, store.ErrSubscriberTooSlow) {
		t.Fatalf("the lagging reader ended with %v, want ErrSubscriberTooSlow", err)
	}
	next := add(t, s, br, "after", store.WriteOptions{}).Head
	expectCommits(t, live, head, next, 5*time.Second)
}

// Issue 16 review, finding 3: when b catches up with a branch deleted
// through a and its read of the deleted log fails, the handle is not
// marked deleted (which ended b's subscribers with ErrBranchDeleted
// without their BRANCH_DELETED): sync fails retryable, and the next one
// delivers the log through BRANCH_DELETED. The events' read joins the
// messages table, which the test locks; the head's read (events only)
// succeeds.
func TestReviewDeletedBranchFailedReadKeepsBranchDeleted(t *testing.T) {
	a, b, br, sub := behindReplica(t, func(c *Config) { c.StatementTimeout = 300 * time.Millisecond })
	head := add(t, a, br, "x", store.WriteOptions{}).Head
	if _, err := a.DeleteBranch(tctx(t), br, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	h := b.handleOf(br, sub.Incarnation)
	if h == nil {
		t.Fatal("no handle on b")
	}
	unlock := lockTable(t, a, "messages")
	if err := b.sync(tctx(t), h); !errors.Is(err, store.ErrStorageUnavailable) {
		t.Fatalf("sync with the deleted log unreadable: %v, want ErrStorageUnavailable", err)
	}
	unlock()
	if err := b.sync(tctx(t), h); err != nil {
		t.Fatal(err)
	}
	expectCommits(t, sub, 1, head, 5*time.Second)
	c, err := nextWithin(t, sub, 5*time.Second)
	if err != nil || c[0].Kind != store.EventBranchDeleted {
		t.Fatalf("after the message: %v %v, want BRANCH_DELETED", c, err)
	}
	if _, err := nextWithin(t, sub, 5*time.Second); !errors.Is(err, store.ErrBranchDeleted) {
		t.Fatalf("the end: %v, want ErrBranchDeleted", err)
	}
}
