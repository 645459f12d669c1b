package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// deepBranch returns a branch whose log holds n events (head n).
func deepBranch(t *testing.T, m *Memory, n int) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	res, err := m.CreateBranch(ctx, CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if _, err := m.AddMessage(ctx, res.Branch.ID, AddInput{Factory: Factory{Instruction: jsonv.StringValue("i" + strconv.Itoa(i))}}, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return res.Branch.ID
}

// TestSubscribeDeepCursorCopiesNoBacklog (review: Subscribe copied every
// retained event after the cursor under the write lock, about 1.3 MiB per
// subscription with 10,000 events, none of it counted against the memory
// budget). docs/design.md#sequences: "The writer never
// waits for a watcher"; a subscription with a deep cursor is registered in
// O(1) and catches up from the log a chunk at a time, so what Subscribe
// allocates, and what an open subscription part way through its replay
// holds, do not grow with the backlog.
func TestSubscribeDeepCursorCopiesNoBacklog(t *testing.T) {
	const events, subs = DefaultEventRetention, 100
	m := NewMemory(WithMemoryBudget(0))
	b := deepBranch(t, m, events)
	ctx := context.Background()
	after := uint64(1)

	allocs := testing.AllocsPerRun(20, func() {
		s, err := m.Subscribe(ctx, b, SubscribeInput{After: &after})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	})
	t.Logf("Subscribe+Close after=1 with %d events: %.0f allocations", events, allocs)
	if allocs > 10 { // the subscription, its channel, the map's growth; the old copy made ~10,000
		t.Errorf("Subscribe with %d events after the cursor made %.0f allocations: it copies the backlog", events-1, allocs)
	}

	var before, after2 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	open := make([]*Subscription, subs)
	for i := range open {
		s, err := m.Subscribe(ctx, b, SubscribeInput{After: &after})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := s.Next(ctx); err != nil || c[0].Sequence != 2 {
			t.Fatalf("first commit %v, %v; want 2", c, err)
		}
		open[i] = s
	}
	runtime.GC()
	runtime.ReadMemStats(&after2)
	per := (int64(after2.HeapAlloc) - int64(before.HeapAlloc)) / subs
	t.Logf("%d subscriptions after=1 with %d retained events, one commit read: %d B each", subs, events, per)
	// A chunk of replayChunk commits (~8 KiB) and a channel of 257 slots (~6 KiB); the old copy was ~1.3 MiB.
	if per > 64<<10 {
		t.Errorf("each subscription holds %d B part way through its replay, want at most 64 KiB", per)
	}
	for _, s := range open {
		if s.Last() != 2 {
			t.Errorf("Last = %d", s.Last())
		}
		s.Close()
	}
	if n := m.subsOpen.Load(); n != 0 {
		t.Errorf("%d subscriptions still counted after Close", n)
	}
}

// TestSubscribeCatchUpChunks: the replay comes in chunks of replayChunk
// commits, each copied under the read lock; a subscription holds at most
// a chunk's commits it has not returned, and publish passes it over (its
// buffer stays empty) until it has caught up.
func TestSubscribeCatchUpChunks(t *testing.T) {
	m := NewMemory()
	b := deepBranch(t, m, 1000)
	ctx := context.Background()
	s, err := m.Subscribe(ctx, b, SubscribeInput{After: new(uint64), Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.replay) != 0 || !s.replaying {
		t.Fatalf("Subscribe copied %d commits", len(s.replay))
	}
	r := s.Replay()
	if len(r) != replayChunk || r[0][0].Sequence != 1 || s.Last() != replayChunk {
		t.Fatalf("first chunk: %d commits from %d, Last %d; want %d from 1", len(r), r[0][0].Sequence, s.Last(), replayChunk)
	}
	if _, err := m.AddMessage(ctx, b, AddInput{Factory: Factory{Instruction: jsonv.StringValue("x")}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(s.ch) != 0 {
		t.Error("publish pushed a commit to a subscription catching up")
	}
	n := replayChunk
	for r := s.Replay(); r != nil; r = s.Replay() {
		if len(r) > replayChunk {
			t.Fatalf("a chunk of %d commits", len(r))
		}
		n += len(r)
	}
	if n != 1001 || s.Last() != 1001 {
		t.Errorf("replayed %d commits to %d, want 1001", n, s.Last())
	}
	if head, ok := s.CaughtUp(); !ok || head != 1001 {
		t.Errorf("CaughtUp = %d, %v after the replay", head, ok)
	}
}

// TestSubscribeCatchUpOvertakenLast: with the memory backend, a
// subscription catching up holds the chunk it copied; when the log evicts
// the event after it, it is ended as too slow (ADR-0006 D4 / docs/design.md#sequences:
// the watch stream "reads the event log, which is written under the branch
// lock, in sequence order"; docs/design.md#sequences: "one that falls behind is ended
// with RESOURCE_EXHAUSTED and its last delivered sequence, so it can
// resume") with Last at the end of that chunk, delivered first; the
// resume is HISTORY_COMPACTED with the oldest retained sequence.
func TestSubscribeCatchUpOvertakenLast(t *testing.T) {
	const retention = 200
	m := NewMemory(WithEventRetention(retention))
	b := deepBranch(t, m, retention)
	ctx := context.Background()
	s, err := m.Subscribe(ctx, b, SubscribeInput{After: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c, err := s.Next(ctx); err != nil || c[0].Sequence != 1 {
		t.Fatalf("Next = %v, %v", c, err)
	}
	for range replayChunk + 1 { // evicts 1..65: the chunk held 1..64, so 65 is lost to it
		if _, err := m.AddMessage(ctx, b, AddInput{Factory: Factory{Instruction: jsonv.StringValue("x")}}, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var got uint64 = 1
	for {
		c, err := s.Next(ctx)
		if err != nil {
			var se *SequenceError
			if !errors.As(err, &se) || !errors.Is(err, ErrSubscriberTooSlow) || se.Last != replayChunk {
				t.Fatalf("end %v, want too slow with Last %d", err, replayChunk)
			}
			break
		}
		if c[0].Sequence != got+1 {
			t.Fatalf("commit %d after %d", c[0].Sequence, got)
		}
		got = c[0].Sequence
	}
	if got != replayChunk {
		t.Errorf("delivered through %d before the end, want the chunk's %d", got, replayChunk)
	}
	_, err = m.Subscribe(ctx, b, SubscribeInput{After: &got})
	var se *SequenceError
	if !errors.As(err, &se) || !errors.Is(err, ErrHistoryCompacted) || se.Oldest != replayChunk+2 {
		t.Errorf("resume after %d: %v, want HISTORY_COMPACTED, oldest %d", got, err, replayChunk+2)
	}
}

// TestFeedEndAll: a database engine ends every subscriber of a branch when
// it can no longer vouch for the live feed (issue 16: rows it had not
// published were deleted, or its wake-ups were cut). Each subscription, a
// live one and one still catching up, delivers what it holds, then ends
// with the reason as a *SequenceError carrying the cursor to resume from;
// a later Publish reaches none of them.
func TestFeedEndAll(t *testing.T) {
	m := NewMemory()
	b := deepBranch(t, m, 5)
	ctx := context.Background()
	live, err := m.Subscribe(ctx, b, SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	catching, err := m.Subscribe(ctx, b, SubscribeInput{After: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer catching.Close()
	res, err := m.AddMessage(ctx, b, AddInput{Factory: Factory{Instruction: jsonv.StringValue("held")}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	br, err := m.writeLocked(b)
	if err != nil {
		t.Fatal(err)
	}
	reason := errors.Join(errors.New("the LISTEN connection was lost"), ErrStorageUnavailable)
	br.feed.EndAll(reason)
	br.mu.Unlock()
	if _, err := m.AddMessage(ctx, b, AddInput{Factory: Factory{Instruction: jsonv.StringValue("after")}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	c, err := live.Next(ctx)
	if err != nil || c[0].Sequence != res.Head {
		t.Fatalf("live subscriber's held commit: %v, %v; want sequence %d", c, err, res.Head)
	}
	for i, s := range []*Subscription{live, catching} {
		var err error
		for err == nil {
			_, err = s.Next(ctx)
		}
		var se *SequenceError
		if !errors.Is(err, ErrStorageUnavailable) || !errors.As(err, &se) || se.Last != s.Last() {
			t.Fatalf("subscriber %d ended with %v (cursor %d), want the reason and its cursor", i, err, s.Last())
		}
		// The message and the metadata name the cursor to resume from, not a head the stream
		// never knew.
		if want := fmt.Sprintf("last delivered sequence %d", s.Last()); !strings.Contains(err.Error(), want) ||
			se.ErrorMetadata()["lastSequence"] != fmt.Sprint(s.Last()) {
			t.Fatalf("subscriber %d ended with %q, metadata %v; want %q and lastSequence", i, err, se.ErrorMetadata(), want)
		}
		if s.Last() > res.Head {
			t.Fatalf("subscriber %d got sequence %d, published after EndAll", i, s.Last())
		}
	}
}
