package store

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
)

// bigCommit is a commit of its own sequence that holds about n bytes of its own (a progression
// of n/16 ids), as a database engine's commit holds the messages it decoded for its watchers.
func bigCommit(seq uint64, n int) Commit {
	return Commit{{Sequence: seq, CommitFirst: seq, CommitLast: seq, Kind: EventProgressionSet, Progression: make([]uuid.UUID, n/16)}}
}

// TestSubscriberBytesBoundHeap measures what subscribers that never read keep alive: the heap
// after a collection, not a timing. Four of them on one feed are published 200 commits of
// 256 KiB each. Bounded only by their count (256), each buffered all 200, 50 MiB the commits
// held; bounded by the default bytes (2 MiB), each takes what fits (7 of these) and is ended as
// too slow at the next, so the bound is the subscribers' bytes plus one commit each.
func TestSubscriberBytesBoundHeap(t *testing.T) {
	const (
		subs    = 4
		commits = 200
		size    = 256 << 10
	)
	var mu sync.RWMutex
	f := NewFeed(&mu, &failingLog{})
	var open atomic.Int64
	var held []*Subscription
	mu.Lock()
	for range subs {
		s, err := f.Subscribe(uuid.New(), uuid.New(), SubscribeInput{}, SubscriptionLimits{Buffer: DefaultSubscriberBuffer, Open: &open})
		if err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
		held = append(held, s)
	}
	mu.Unlock()
	before := heapAfterGC()
	for seq := uint64(1); seq <= commits; seq++ {
		mu.Lock()
		f.Publish(bigCommit(seq, size))
		mu.Unlock()
	}
	grown := heapAfterGC() - before
	limit := int64(subs * (DefaultSubscriberBufferBytes + size + 1<<10))
	t.Logf("heap grew %d KiB for %d subscribers that never read; bound %d KiB", grown>>10, subs, limit>>10)
	if grown > limit {
		t.Errorf("heap grew %d bytes, more than %d: the buffers are not bounded in bytes", grown, limit)
	}
	for _, s := range held {
		if err := s.Err(); err == nil {
			t.Errorf("a subscriber that never read %d commits of %d bytes is still open", commits, size)
		}
		if n := len(s.Events()); n < 1 || int64(n)*size > DefaultSubscriberBufferBytes {
			t.Errorf("a subscriber that never read buffered %d commits of %d bytes, want what fits in %d bytes", n, size, DefaultSubscriberBufferBytes)
		}
	}
	runtime.KeepAlive(held)
}

// heapAfterGC is the live heap once collected.
func heapAfterGC() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestSubscriberBytesReleased: the bytes a subscriber's reader has taken stop counting at the
// next publish, so a reader that keeps up is never ended by the bytes, however many it has read;
// one that stops is ended once what it left buffered passes the bound, and the cursor it gets
// is the last commit buffered.
func TestSubscriberBytesReleased(t *testing.T) {
	var mu sync.RWMutex
	f := NewFeed(&mu, &failingLog{})
	var open atomic.Int64
	mu.Lock()
	s, err := f.Subscribe(uuid.New(), uuid.New(), SubscribeInput{BufferBytes: 3 * commitBytes(bigCommit(1, 1<<10))}, SubscriptionLimits{Buffer: 256, Open: &open})
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	publish := func(seq uint64) {
		mu.Lock()
		f.Publish(bigCommit(seq, 1<<10))
		mu.Unlock()
	}
	seq := uint64(0)
	for range 500 { // far past the bytes, read as they come
		seq++
		publish(seq)
		if c := <-s.Events(); c[0].Sequence != seq {
			t.Fatalf("read %d, want %d", c[0].Sequence, seq)
		}
	}
	for range 4 { // 3 fit, the 4th ends it
		seq++
		publish(seq)
	}
	var got []uint64
	for range len(s.Events()) { // what it buffered, read without waiting
		got = append(got, (<-s.Events())[0].Sequence)
	}
	if len(got) != 3 || got[2] != seq-1 {
		t.Errorf("buffered %v, want the 3 before %d", got, seq)
	}
	var se *SequenceError
	if err := s.Err(); !errors.As(err, &se) || !errors.Is(err, ErrSubscriberTooSlow) || se.Last != seq-1 {
		t.Errorf("Err = %v, want too slow with cursor %d", err, seq-1)
	}
}
