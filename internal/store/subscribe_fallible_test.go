package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// failingLog is a FallibleLog of one-event commits 1..last whose reads
// fail with err once after passes failAfter (rows gone, or the server
// down).
type failingLog struct {
	last, failAfter uint64
	err             error
	deleted         bool // the last commit is BRANCH_DELETED
}

func (l *failingLog) Oldest() uint64 { return 1 }
func (l *failingLog) Last() uint64   { return l.last }
func (l *failingLog) Frozen() Log    { cp := *l; return &cp }

func (l *failingLog) Chunk(after uint64, n int, keep func(Commit) Commit) ([]Commit, uint64) {
	panic("a FallibleLog is read through ChunkErr")
}

func (l *failingLog) ChunkErr(after, last uint64, n int, keep func(Commit) Commit) ([]Commit, uint64, error) {
	if after >= l.failAfter {
		return nil, after, l.err
	}
	var out []Commit
	for seq := after + 1; seq <= min(last, l.failAfter) && len(out) < n; seq++ {
		out = append(out, keep(l.commit(seq)))
		after = seq
	}
	return out, after, nil
}

func (l *failingLog) commit(seq uint64) Commit {
	k := EventMessageAdded
	if l.deleted && seq == l.last {
		k = EventBranchDeleted
	}
	return Commit{{Sequence: seq, CommitFirst: seq, CommitLast: seq, Kind: k}}
}

// next reads sub with a deadline: a reader that never returns (the review's
// loop) fails the test instead of hanging it.
func next(t *testing.T, sub *Subscription) (Commit, error) {
	t.Helper()
	type res struct {
		c   Commit
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, err := sub.Next(context.Background())
		done <- res{c, err}
	}()
	select {
	case r := <-done:
		return r.c, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return in 10s: the reader loops on a log it cannot read")
		return nil, nil
	}
}

// Issue 16 review, finding 1: a reader catching up from a log it cannot
// read (rows gone, the server down, the store closed) ends its own
// subscription with the log's error, after delivering what it copied,
// with the cursor to resume from.
func TestFallibleLogEndsTheReader(t *testing.T) {
	errGone := errors.New("rows gone")
	var mu sync.RWMutex
	f := NewFeed(&mu, &failingLog{last: 10, failAfter: 3, err: errGone})
	var open atomic.Int64
	after := uint64(0)
	mu.Lock()
	sub, err := f.Subscribe(uuid.New(), uuid.New(), SubscribeInput{After: &after}, SubscriptionLimits{Buffer: 8, Open: &open})
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for want := uint64(1); want <= 3; want++ {
		c, err := next(t, sub)
		if err != nil || c[0].Sequence != want {
			t.Fatalf("commit %d: %v %v", want, c, err)
		}
	}
	_, err = next(t, sub)
	var se *SequenceError
	if !errors.Is(err, errGone) || !errors.As(err, &se) || se.Last != 3 {
		t.Fatalf("after the failed read: %v, want errGone with Last 3", err)
	}
	mu.RLock()
	n := f.Watchers()
	mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d watchers after the reader's end, want 0", n)
	}
}

// The same for a reader the branch's delete ended while it caught up: it
// reads the frozen log, and when that read fails it did not get
// BRANCH_DELETED, so its end is the log's error, not ErrBranchDeleted.
func TestFallibleFrozenLogEndsTheReader(t *testing.T) {
	errGone := errors.New("rows gone")
	var mu sync.RWMutex
	log := &failingLog{last: 10, failAfter: 2, err: errGone, deleted: true}
	f := NewFeed(&mu, log)
	var open atomic.Int64
	after := uint64(0)
	mu.Lock()
	sub, err := f.Subscribe(uuid.New(), uuid.New(), SubscribeInput{After: &after}, SubscriptionLimits{Buffer: 8, Open: &open})
	if err == nil {
		f.Publish(Commit{{Sequence: 10, CommitFirst: 10, CommitLast: 10, Kind: EventBranchDeleted}})
	}
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for want := uint64(1); want <= 2; want++ {
		if c, err := next(t, sub); err != nil || c[0].Sequence != want {
			t.Fatalf("commit %d: %v %v", want, c, err)
		}
	}
	_, err = next(t, sub)
	var se *SequenceError
	if !errors.Is(err, errGone) || errors.Is(err, ErrBranchDeleted) || !errors.As(err, &se) || se.Last != 2 {
		t.Fatalf("after the failed read of the frozen log: %v, want errGone with Last 2", err)
	}
}
