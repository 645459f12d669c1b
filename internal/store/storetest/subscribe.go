package storetest

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// next reads one commit or fails the test.
func next(t *testing.T, s *store.Subscription) store.Commit {
	t.Helper()
	c, err := s.Next(ctx(t))
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return c
}

// testSubscribe: DESIGN.md "Sequences, events and watch": a subscription
// replays the retained events after its cursor, then goes live with no gap
// and no duplicate, one commit at a time (two events for
// CreateActionResponse); a cursor in the middle of a commit resumes with
// the rest of it; no cursor means from now.
func testSubscribe(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	req := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: jsonv.ObjectValue()}).Message.Message
	resp, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: req.ID, Output: jsonv.IntValue(1)}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Sequences: 1 created, 2 request, 3-4 the response commit.
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(0))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := next(t, s)
	if len(c) != 1 || c[0].Kind != store.EventBranchCreated || c[0].Sequence != 1 || c[0].Branch == nil {
		t.Fatalf("first commit = %+v", c)
	}
	if c = next(t, s); c[0].Kind != store.EventMessageAdded || c[0].Message.ID != req.ID {
		t.Fatalf("second commit = %+v", c)
	}
	c = next(t, s)
	if len(c) != 2 || c[0].Sequence != 3 || c[1].Sequence != 4 || c[0].Kind != store.EventMessageAdded ||
		c[1].Kind != store.EventMessageReplaced || c[0].Message.ID != resp.Message.Message.ID || c[0].CommitLast != 4 {
		t.Fatalf("action response commit = %+v", c)
	}

	mid, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(3))})
	if err != nil {
		t.Fatal(err)
	}
	defer mid.Close()
	if c := next(t, mid); len(c) != 1 || c[0].Sequence != 4 {
		t.Fatalf("resuming mid-commit gave %+v, want the rest of the commit (4)", c)
	}
	fromNow, err := st.Subscribe(ctx(t), b, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	defer fromNow.Close()

	// Live, while a writer runs: contiguous sequences, the events as written.
	const n = 200
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if _, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text(strconv.Itoa(i))}}, store.WriteOptions{}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for _, sub := range []*store.Subscription{s, fromNow} {
		want := uint64(5)
		for want < 5+n {
			for _, ev := range next(t, sub) {
				if ev.Sequence != want {
					t.Fatalf("got sequence %d, want %d (a gap or a duplicate)", ev.Sequence, want)
				}
				if s, _ := ev.Message.Content.Dict().Get("instruction"); !jsonv.Equal(s, text(strconv.Itoa(int(want-5)))) {
					t.Fatalf("event %d carries %s", want, s)
				}
				want++
			}
		}
		if sub.Last() != 4+n {
			t.Errorf("Last = %d", sub.Last())
		}
	}
	wg.Wait()

	s.Close()
	_, err = s.Next(ctx(t))
	wantErr(t, err, store.ErrSubscriptionClosed)

	// Deletion ends a subscription after the BRANCH_DELETED event.
	if _, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := next(t, fromNow); c[0].Kind != store.EventBranchDeleted {
		t.Fatalf("last commit = %+v", c)
	}
	_, err = fromNow.Next(ctx(t))
	wantErr(t, err, store.ErrBranchDeleted)
}

// testSubscribeErrors: DESIGN.md: a cursor of another incarnation, or older
// than what is retained, is OUT_OF_RANGE with the oldest available sequence
// (never a silent restart); a cursor ahead of the head is INVALID_ARGUMENT.
func testSubscribeErrors(t *testing.T, newStore Factory) {
	st := newStore(t, Options{EventRetention: 5})
	b := newBranch(t, st)
	for i := range 10 {
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	info, _ := st.GetBranch(ctx(t), b) // head 11, retained 7..11
	_, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(2))})
	wantErr(t, err, store.ErrHistoryCompacted)
	var se *store.SequenceError
	if !errors.As(err, &se) || se.Oldest != 7 || se.ErrorMetadata()["oldestSequence"] != "7" {
		t.Errorf("compacted error %v, want oldest 7", err)
	}
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(6)), Incarnation: &info.Incarnation})
	if err != nil {
		t.Fatalf("the oldest resumable cursor: %v", err)
	}
	if c := next(t, s); c[0].Sequence != 7 {
		t.Errorf("resumed at %d", c[0].Sequence)
	}
	s.Close()
	other := uuid.New()
	_, err = st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(10)), Incarnation: &other})
	wantErr(t, err, store.ErrHistoryCompacted)
	_, err = st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(info.HeadSequence + 1)})
	wantErr(t, err, store.ErrCursorAhead)
	_, err = st.Subscribe(ctx(t), uuid.New(), store.SubscribeInput{})
	wantErr(t, err, store.ErrBranchNotFound)
}

// testSubscriberTooSlow: DESIGN.md: the writer never waits for a watcher; a
// subscriber whose bounded buffer overflows is ended with
// RESOURCE_EXHAUSTED and its last delivered sequence, after what it had
// buffered.
func testSubscriberTooSlow(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{Buffer: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 { // the writer is not blocked by the full buffer
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	for want := uint64(2); want <= 3; want++ {
		if c := next(t, s); c[0].Sequence != want {
			t.Fatalf("buffered commit %d, want %d", c[0].Sequence, want)
		}
	}
	_, err = s.Next(ctx(t))
	wantErr(t, err, store.ErrSubscriberTooSlow)
	var se *store.SequenceError
	if !errors.As(err, &se) || se.Last != 3 || se.ErrorMetadata()["lastSequence"] != "3" {
		t.Errorf("too-slow error %v, want last sequence 3", err)
	}
	// It resumes from its cursor with nothing lost.
	r, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(se.Last)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if c := next(t, r); c[0].Sequence != 4 {
		t.Errorf("resumed at %d, want 4", c[0].Sequence)
	}
}
