package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

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

// Writes queued while a group runs go together in the next (one
// transaction), and each lands on its branch at index 0, at the head it
// reported.
func TestGroupCommitSharesTransaction(t *testing.T) {
	s := groupStore(t, nil)
	h := hold(s)
	others := make([]uuid.UUID, 8)
	for i := range others {
		others[i] = newBranch(t, s)
	}
	held := h.start(t, s)
	results := queueWrites(t, s, others, make([]store.WriteOptions, len(others)))
	close(h.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	heads := make([]uint64, len(others))
	ids := make([]uuid.UUID, len(others))
	for i, r := range results {
		got := <-r
		if got.err != nil || got.res.Index != 0 {
			t.Fatalf("member: %+v, %v: want index 0", got.res, got.err)
		}
		heads[i], ids[i] = got.res.Head, got.res.Message.Message.ID
	}
	if got := h.taken(); len(got) != 2 || got[1] != len(others) {
		t.Fatalf("groups taken %v: want [1 %d]", got, len(others))
	}
	for i, br := range others {
		info, err := s.GetBranch(tctx(t), br)
		if err != nil {
			t.Fatal(err)
		}
		msgs := fullOrder(t, s, br)
		if len(msgs) != 1 || info.HeadSequence != heads[i] || info.MessageCount != 1 {
			t.Fatalf("branch %s: %d messages (count %d), head %d: want 1 and %d", br, len(msgs), info.MessageCount, info.HeadSequence, heads[i])
		}
		if msgs[0].Message.ID != ids[i] || msgs[0].Sequence != heads[i] {
			t.Fatalf("branch %s holds %s at sequence %d, want %s at %d", br, msgs[0].Message.ID, msgs[0].Sequence, ids[i], heads[i])
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
	held := h.start(t, s)
	wrongHead := uint64(7)
	branches := []uuid.UUID{ok1, stale, uuid.New(), repeat, ok2}
	opts := []store.WriteOptions{{}, {ExpectedHead: &wrongHead}, {}, {RequestID: "r1"}, {}}
	results := queueWrites(t, s, branches, opts)
	close(h.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
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
	held := h.start(t, s)
	results := queueWrites(t, s, branches, make([]store.WriteOptions, len(branches)))
	close(h.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
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

// A write whose caller left before its group started is not written.
func TestGroupCallerLeftNotWritten(t *testing.T) {
	s := groupStore(t, nil)
	h := hold(s)
	gone := newBranch(t, s)
	held := h.start(t, s)
	ctx, cancel := context.WithCancel(tctx(t))
	left := make(chan error, 1)
	go func() {
		_, err := s.AddMessage(ctx, gone, instruction("m"), store.WriteOptions{})
		left <- err
	}()
	waitFor(t, 10*time.Second, "the write queued", func() bool { return s.group.queued() == 1 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left got %v, want context.Canceled", err)
	}
	close(h.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	add(t, s, newBranch(t, s), "after", store.WriteOptions{}) // the worker has passed the queue since
	if n := len(fullOrder(t, s, gone)); n != 0 {
		t.Fatalf("the write whose caller left was written: %d messages", n)
	}
}
