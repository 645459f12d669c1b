package storetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/store"
)

// bigText is an instruction of about n bytes, distinct per i.
func bigText(i, n int) string { return strconv.Itoa(i) + strings.Repeat("x", n) }

// testSubscriberTooSlowBytes: a subscriber's buffer is bounded in bytes as well as in commits
// (the hostile review: 256 commits of 4 MiB each, about 1 GiB, for a watcher that never reads).
// One that buffers past its bytes is ended as too slow with its cursor, far below the count; it
// resumes from the cursor and gets every commit exactly once. A commit larger than the bound on
// its own is still delivered live to a reader that keeps up: it is taken into an empty buffer.
func testSubscriberTooSlowBytes(t *testing.T, newStore Factory) {
	const size = 16 << 10 // each commit about 17 KB by the heap estimate
	st := newStore(t, Options{})
	b := newBranch(t, st)
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{BufferBytes: 64 << 10}) // room for 3
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writes = 10 // far below the default 256 commits
	for i := range writes {
		addInstruction(t, st, b, bigText(i, size)) // sequences 2 to 11
	}
	seen := map[uint64]int{}
	buffered := len(s.Events())
	for range buffered { // what it buffered, read without waiting: a buffer not bounded ends nothing
		c := <-s.Events()
		seen[c[0].Sequence]++
	}
	err = s.Err()
	wantErr(t, err, store.ErrSubscriberTooSlow)
	var se *store.SequenceError
	if !errors.As(err, &se) || se.Last != 1+uint64(buffered) {
		t.Fatalf("too-slow error %v, want the cursor %d", err, 1+buffered)
	}
	if buffered < 1 || buffered >= writes {
		t.Fatalf("buffered %d commits of %d bytes in 64 KiB before the end, want 1 to %d", buffered, size, writes-1)
	}
	// It resumes from its cursor: the rest comes from the log, each commit once.
	r, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(se.Last), BufferBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Last() < 1+writes {
		seen[next(t, r)[0].Sequence]++
	}
	for seq := uint64(2); seq <= 1+writes; seq++ {
		if seen[seq] != 1 {
			t.Errorf("sequence %d delivered %d times, want once (all: %v)", seq, seen[seq], seen)
		}
	}

	// A reader that keeps up gets commits larger than the bound live, one at a time.
	small, err := st.Subscribe(ctx(t), b, store.SubscribeInput{BufferBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	for i := range 3 {
		res := addInstruction(t, st, b, bigText(i, size))
		if c := next(t, small); c[0].Sequence != res.Head {
			t.Fatalf("live commit %d, want %d", c[0].Sequence, res.Head)
		}
	}
	if err := small.Err(); err != nil {
		t.Errorf("a reader that keeps up was ended: %v", err)
	}
}
