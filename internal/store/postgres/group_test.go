package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/storetest"
)

// Group commit (group.go, docs/decisions/0021): concurrent writes on
// different branches share a transaction, each with the outcome it would
// have had alone.

// groupStore opens a Store with one group worker; fail, when not nil,
// runs at the end of every group's transaction (its error fails it).
func groupStore(t *testing.T, fail func(ws []*branchWrite) error) *Store {
	t.Helper()
	cfg := testConfig(pgtest.New(t), storetest.Options{})
	cfg.GroupWorkers = 1
	s := openReady(t, cfg)
	s.hookGroup = fail
	return s
}

// holder holds the first group the worker takes until release, and
// records the size of every group taken.
type holder struct {
	mu      sync.Mutex
	sizes   []int
	held    chan struct{}
	release chan struct{}
}

func hold(s *Store) *holder {
	h := &holder{held: make(chan struct{}), release: make(chan struct{})}
	s.hookTaken = func(ws []*branchWrite) {
		h.mu.Lock()
		first := len(h.sizes) == 0
		h.sizes = append(h.sizes, len(ws))
		h.mu.Unlock()
		if first {
			close(h.held)
			<-h.release
		}
	}
	return h
}

func (h *holder) taken() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

// start begins a write the holder holds (the first group), and returns
// its outcome's channel once the worker holds it.
func (h *holder) start(t *testing.T, s *Store) <-chan error {
	t.Helper()
	b := newBranch(t, s)
	done := make(chan error, 1)
	go func() { _, err := s.AddMessage(tctx(t), b, instruction("held"), store.WriteOptions{}); done <- err }()
	<-h.held
	return done
}

func instruction(text string) store.AddInput {
	return store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(text)}}
}

type result struct {
	res store.WriteResult
	err error
}

// queueWrites starts an AddMessage on each branch, with its options, and
// waits until all are queued behind the held group.
func queueWrites(t *testing.T, s *Store, branches []uuid.UUID, opts []store.WriteOptions) []chan result {
	t.Helper()
	out := make([]chan result, len(branches))
	for i, b := range branches {
		out[i] = make(chan result, 1)
		go func() {
			res, err := s.AddMessage(tctx(t), b, instruction("m"), opts[i])
			out[i] <- result{res, err}
		}()
	}
	waitFor(t, 10*time.Second, "the writes queued", func() bool { return s.group.queued() == len(branches) })
	return out
}

// behind queues writes on branches, with opts, behind a held write, lets
// the worker go on and returns their outcomes' channels: they are the
// worker's next group.
func (h *holder) behind(t *testing.T, s *Store, branches []uuid.UUID, opts []store.WriteOptions) []chan result {
	t.Helper()
	held := h.start(t, s)
	results := queueWrites(t, s, branches, opts)
	close(h.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	return results
}

// Writes queued while a group runs go together in the next (one
// transaction), and each lands on its branch at index 0, at the head it
// reported.
func TestGroupCommitSharesTransaction(t *testing.T) {
	s := groupStore(t, nil)
	others := make([]uuid.UUID, 8)
	for i := range others {
		others[i] = newBranch(t, s)
	}
	// Rows whose nullable columns are set (system_id, selected) beside rows
	// where they are NULL, in the one qAppendMany statement.
	if _, err := s.SetSystem(tctx(t), others[0], envelope.NewSystem("be brief"), store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetProgression(tctx(t), others[1], &[]uuid.UUID{}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	h := hold(s)
	opts := make([]store.WriteOptions, len(others))
	opts[2].RequestID = "req-2"
	results := h.behind(t, s, others, opts)
	heads := make([]uint64, len(others))
	ids := make([]uuid.UUID, len(others))
	for i, r := range results {
		got := <-r
		want := 0
		if i == 0 {
			want = 1
		}
		if got.err != nil || got.res.Index != want {
			t.Fatalf("member %d: %+v, %v: want index %d", i, got.res, got.err, want)
		}
		heads[i], ids[i] = got.res.Head, got.res.Message.Message.ID
	}
	// The request id was remembered in the group: a repeat replays it.
	again, err := s.AddMessage(tctx(t), others[2], instruction("m"), opts[2])
	if err != nil || !again.Replayed || again.Message.Message.ID != ids[2] {
		t.Fatalf("repeat of the group's request id: %+v, %v: want the first result, replayed", again, err)
	}
	if got := h.taken(); len(got) < 2 || got[1] != len(others) {
		t.Fatalf("groups taken %v: want [1 %d ...]", got, len(others))
	}
	// One transaction wrote them all: a group that failed and ran its
	// members alone would have answered the same.
	var txs int
	if err := s.pool.QueryRow(tctx(t), `SELECT count(DISTINCT xmin::text) FROM messages WHERE id = ANY($1)`, ids).Scan(&txs); err != nil {
		t.Fatal(err)
	}
	if txs != 1 {
		t.Fatalf("the group's messages were written by %d transactions, want 1", txs)
	}
	for i, br := range others {
		info, err := s.GetBranch(tctx(t), br)
		if err != nil {
			t.Fatal(err)
		}
		msgs := fullOrder(t, s, br)
		want := 1
		if i == 0 {
			want = 2 // the system at index 0, the message after it
		}
		if len(msgs) != want || info.HeadSequence != heads[i] || info.MessageCount != want {
			t.Fatalf("branch %s: %d messages (count %d), head %d: want %d and %d", br, len(msgs), info.MessageCount, info.HeadSequence, want, heads[i])
		}
		if last := msgs[len(msgs)-1]; last.Message.ID != ids[i] || last.Sequence != heads[i] {
			t.Fatalf("branch %s holds %s at sequence %d, want %s at %d", br, last.Message.ID, last.Sequence, ids[i], heads[i])
		}
	}
}

// A member its rules refuse (a head mismatch, an unknown branch) is
// answered alone with its error, a repeated request id with the first
// result, and the others commit.
func TestGroupMemberRefusedAlone(t *testing.T) {
	s := groupStore(t, nil)
	ok1, ok2, stale, repeat := newBranch(t, s), newBranch(t, s), newBranch(t, s), newBranch(t, s)
	first := add(t, s, repeat, "first", store.WriteOptions{RequestID: "r1"})
	h := hold(s)
	wrongHead := uint64(7)
	branches := []uuid.UUID{ok1, stale, uuid.New(), repeat, ok2}
	opts := []store.WriteOptions{{}, {ExpectedHead: &wrongHead}, {}, {RequestID: "r1"}, {}}
	results := h.behind(t, s, branches, opts)
	got := make([]result, len(branches))
	for i := range results {
		got[i] = <-results[i]
	}
	if sizes := h.taken(); len(sizes) != 2 || sizes[1] != len(branches) {
		t.Fatalf("groups taken %v: want [1 %d]", sizes, len(branches))
	}
	for _, i := range []int{0, 4} {
		if got[i].err != nil || got[i].res.Index != 0 {
			t.Errorf("member %d: %+v, %v: want index 0", i, got[i].res, got[i].err)
		}
	}
	if !errors.Is(got[1].err, store.ErrSequenceMismatch) {
		t.Errorf("stale head: %v, want ErrSequenceMismatch", got[1].err)
	}
	if !errors.Is(got[2].err, store.ErrBranchNotFound) {
		t.Errorf("unknown branch: %v, want ErrBranchNotFound", got[2].err)
	}
	if got[3].err != nil || !got[3].res.Replayed || got[3].res.Message.Message.ID != first.Message.Message.ID {
		t.Errorf("repeat: %+v, %v: want the first result, replayed", got[3].res, got[3].err)
	}
	if n := len(fullOrder(t, s, stale)); n != 0 {
		t.Errorf("the refused member wrote %d messages", n)
	}
	if n := len(fullOrder(t, s, repeat)); n != 1 {
		t.Errorf("the repeat left %d messages, want 1", n)
	}
}

// A group that fails with nothing applied (a statement refused) runs again
// write by write: every member lands once.
func TestGroupFailureRunsEachAlone(t *testing.T) {
	var (
		mu     sync.Mutex
		failed int
	)
	s := groupStore(t, func(ws []*branchWrite) error {
		mu.Lock()
		defer mu.Unlock()
		if failed == 0 {
			failed = len(ws)
			return &pgconn.PgError{Code: "23505", Message: "a refused statement (test)"}
		}
		return nil
	})
	h := hold(s)
	branches := make([]uuid.UUID, 6)
	for i := range branches {
		branches[i] = newBranch(t, s)
	}
	results := h.behind(t, s, branches, make([]store.WriteOptions, len(branches)))
	for _, r := range results {
		if got := <-r; got.err != nil || got.res.Index != 0 {
			t.Fatalf("member: %+v, %v: want index 0", got.res, got.err)
		}
	}
	mu.Lock()
	n := failed
	mu.Unlock()
	if n != len(branches) {
		t.Fatalf("the failed group had %d members, want %d", n, len(branches))
	}
	for _, br := range branches {
		if got := len(fullOrder(t, s, br)); got != 1 {
			t.Fatalf("branch %s holds %d messages after the failed group, want 1", br, got)
		}
	}
}

// A write whose caller left before its group started is not written; the
// live write taken with it is.
func TestGroupCallerLeftNotWritten(t *testing.T) {
	s := groupStore(t, nil)
	gone, live := newBranch(t, s), newBranch(t, s)
	h := hold(s)
	held := h.start(t, s)
	ctx, cancel := context.WithCancel(tctx(t))
	left := make(chan error, 1)
	go func() {
		_, err := s.AddMessage(ctx, gone, instruction("m"), store.WriteOptions{})
		left <- err
	}()
	waitFor(t, 10*time.Second, "the write queued", func() bool { return s.group.queued() == 1 })
	livec := make(chan result, 1)
	go func() {
		res, err := s.AddMessage(tctx(t), live, instruction("m"), store.WriteOptions{})
		livec <- result{res, err}
	}()
	waitFor(t, 10*time.Second, "both writes queued", func() bool { return s.group.queued() == 2 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left got %v, want context.Canceled", err)
	}
	n := s.group.queued()
	close(h.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d writes queued after the caller left, want both still there", n)
	}
	if got := <-livec; got.err != nil {
		t.Fatal(got.err)
	}
	if n := len(fullOrder(t, s, gone)); n != 0 {
		t.Fatalf("the write whose caller left was written: %d messages", n)
	}
	if n := len(fullOrder(t, s, live)); n != 1 {
		t.Fatalf("the live write beside it: %d messages, want 1", n)
	}
}

// A member whose row another transaction holds does not hold its group:
// the others commit while it waits, alone, for the lock.
func TestGroupSkipsLockedRow(t *testing.T) {
	s := groupStore(t, nil)
	locked, free := newBranch(t, s), newBranch(t, s)
	tx, err := s.pool.Begin(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // committed below, or the test failed
	if _, err := tx.Exec(tctx(t), qBranchForUpdate, locked); err != nil {
		t.Fatal(err)
	}
	h := hold(s)
	results := h.behind(t, s, []uuid.UUID{locked, free}, []store.WriteOptions{{}, {}})
	if got := <-results[1]; got.err != nil || got.res.Index != 0 {
		t.Fatalf("the free member: %+v, %v", got.res, got.err)
	}
	select {
	case got := <-results[0]:
		t.Fatalf("the member whose row is locked was answered before the lock ended: %+v, %v", got.res, got.err)
	default:
	}
	if err := tx.Commit(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if got := <-results[0]; got.err != nil || got.res.Index != 0 {
		t.Fatalf("the locked member after the lock: %+v, %v", got.res, got.err)
	}
}

// A panic in a group fails its calls, rolls its transaction back (no row
// stays locked, no connection is kept: Close at the test's end would wait
// for it) and the process goes on.
func TestGroupPanicReleasesLocks(t *testing.T) {
	var once sync.Once
	s := groupStore(t, func(ws []*branchWrite) error {
		once.Do(func() { panic("a bug (test)") })
		return nil
	})
	branches := []uuid.UUID{newBranch(t, s), newBranch(t, s), newBranch(t, s)}
	h := hold(s)
	results := h.behind(t, s, branches, make([]store.WriteOptions, len(branches)))
	for _, r := range results {
		if got := <-r; got.err == nil {
			t.Fatalf("a member of the panicking group succeeded: %+v", got.res)
		}
	}
	for _, br := range branches {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.AddMessage(ctx, br, instruction("after"), store.WriteOptions{})
		cancel()
		if err != nil {
			t.Fatalf("a write after the panic: %v (its row still locked?)", err)
		}
		if n := len(fullOrder(t, s, br)); n != 1 {
			t.Fatalf("branch %s: %d messages, want the one written after the panic", br, n)
		}
	}
	// The Store's own goroutines (notifier, prober, janitor) acquire connections now and then,
	// briefly: a connection the panic kept would stay acquired for good.
	waitFor(t, 10*time.Second, "no connection acquired after the panic", func() bool { return s.pool.Stat().AcquiredConns() == 0 })
}

// lockRow holds branch's row in a transaction of the test's until the
// returned function commits it.
func lockRow(t *testing.T, s *Store, branch uuid.UUID) (unlock func()) {
	t.Helper()
	tx, err := s.pool.Begin(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(tctx(t), qBranchForUpdate, branch); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if err := tx.Commit(tctx(t)); err != nil {
				t.Error(err)
			}
		})
	}
}

// A group retried after a deadlock starts afresh, "alone" included: a
// member whose row was locked in the first attempt (so left to run alone)
// and free in the second is written by the second and answered once. It
// was run alone again as well: a second insert of its message (a
// duplicate key error for a write that had committed), or a replay of its
// own request id.
func TestGroupRetryAfterDeadlockStartsAfresh(t *testing.T) {
	var unlock func()
	var once sync.Once
	s := groupStore(t, func(ws []*branchWrite) error {
		retry := false
		once.Do(func() {
			unlock() // the locked member's row is free for the retry
			retry = true
		})
		if retry {
			return &pgconn.PgError{Code: "40P01", Message: "deadlock detected (test)"}
		}
		return nil
	})
	locked, free := newBranch(t, s), newBranch(t, s)
	unlock = lockRow(t, s, locked)
	h := hold(s)
	results := h.behind(t, s, []uuid.UUID{locked, free}, []store.WriteOptions{{}, {}})
	for i, r := range results {
		if got := <-r; got.err != nil || got.res.Index != 0 || got.res.Replayed {
			t.Fatalf("member %d: %+v, %v: want index 0, written once", i, got.res, got.err)
		}
	}
	for _, br := range []uuid.UUID{locked, free} {
		if n := len(fullOrder(t, s, br)); n != 1 {
			t.Fatalf("branch %s holds %d messages, want 1", br, n)
		}
	}
}

// A COMMIT without an answer leaves its group's outcome unknown, but only
// for the members in its transaction: one whose row another transaction
// held, and one whose branch does not exist, were never in it, and get
// their own outcomes (written once the lock ends; NOT_FOUND), not "may or
// may not have been applied".
func TestGroupUnknownCommitOnlyForItsMembers(t *testing.T) {
	var once sync.Once
	s := groupStore(t, func(ws []*branchWrite) error {
		var err error
		once.Do(func() {
			err = &StorageError{Target: "test", Err: store.ErrStorageUnavailable, Cause: errors.New("connection lost at COMMIT (test)"), AtCommit: true}
		})
		return err
	})
	locked, free := newBranch(t, s), newBranch(t, s)
	unlock := lockRow(t, s, locked)
	h := hold(s)
	results := h.behind(t, s, []uuid.UUID{locked, free, uuid.New()}, []store.WriteOptions{{}, {}, {}})
	if got := <-results[1]; !errors.Is(got.err, store.ErrStorageUnavailable) {
		t.Fatalf("the member in the unanswered COMMIT: %+v, %v; want the commit's error", got.res, got.err)
	}
	unlock() // the members left to run alone run one after another, in the order they were queued
	if got := <-results[2]; !errors.Is(got.err, store.ErrBranchNotFound) {
		t.Fatalf("the member whose branch does not exist: %v; want ErrBranchNotFound", got.err)
	}
	if got := <-results[0]; got.err != nil || got.res.Index != 0 {
		t.Fatalf("the member whose row was locked: %+v, %v; want it written once the lock ended", got.res, got.err)
	}
}

// A member left to wait for a row lock holds back only its own branch:
// once the group's other members are answered, their branches may take
// new writes (on another worker) while it waits (docs/decisions/0021).
func TestGroupLockedMemberHoldsOnlyItsBranch(t *testing.T) {
	s := groupStore(t, nil)
	locked, free := newBranch(t, s), newBranch(t, s)
	unlock := lockRow(t, s, locked)
	defer unlock()
	h := hold(s)
	results := h.behind(t, s, []uuid.UUID{locked, free}, []store.WriteOptions{{}, {}})
	if got := <-results[1]; got.err != nil {
		t.Fatalf("the free member: %v", got.err)
	}
	writing := func(id uuid.UUID) bool {
		s.group.mu.Lock()
		defer s.group.mu.Unlock()
		return s.group.writing[id]
	}
	waitFor(t, 5*time.Second, "the free member's branch released", func() bool { return !writing(free) })
	if !writing(locked) {
		t.Fatal("the locked member's branch was released while its write waits")
	}
	unlock()
	if got := <-results[0]; got.err != nil {
		t.Fatalf("the locked member after the lock: %v", got.err)
	}
}
