package storetest

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
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

// testSubscribe: docs/design.md#sequences: a subscription
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
	// The live part below reads one subscription while the other buffers all n commits: room for
	// them in bytes as well as in commits.
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(0)), BufferBytes: 1 << 20})
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
	fromNow, err := st.Subscribe(ctx(t), b, store.SubscribeInput{BufferBytes: 1 << 20})
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

// testSubscribeErrors: docs/design.md#sequences: a cursor of another incarnation, or older
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

// testSubscriberTooSlow: docs/design.md#sequences: the writer never waits for a watcher; a
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

// testSubscribeStart: docs/design.md#sequences: no cursor means from now; a subscription
// reports where it starts (the cursor, or the head), the head and the
// oldest retained sequence, so that WatchBranch's first frame can confirm
// them; with no write meanwhile, the replay is exactly the commits in
// (After, Head].
func testSubscribeStart(t *testing.T, newStore Factory) {
	st := newStore(t, Options{EventRetention: 4})
	b := newBranch(t, st)
	for i := range 5 {
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	info, err := st.GetBranch(ctx(t), b) // head 6, retained 3..6
	if err != nil {
		t.Fatal(err)
	}
	live, err := st.Subscribe(ctx(t), b, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if live.After != 6 || live.Head != 6 || live.Oldest != 3 || live.Incarnation != info.Incarnation || live.BranchID != b {
		t.Errorf("live subscription starts %+v, want after 6, head 6, oldest 3", live)
	}
	if r := live.Replay(); r != nil {
		t.Errorf("a subscription from now replays %v", r)
	}
	from, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(4))})
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	if from.After != 4 || from.Head != 6 {
		t.Errorf("subscription after 4 starts %+v", from)
	}
	r := from.Replay()
	if len(r) != 2 || r[0][0].Sequence != 5 || r[1][0].Sequence != 6 || from.Last() != 6 {
		t.Errorf("replay after 4 = %v (last %d), want 5 and 6", r, from.Last())
	}
	if from.Replay() != nil {
		t.Error("a second Replay returned the commits again")
	}
}

// testSubscribeKinds: a kinds filter delivers only those events; a commit
// keeps its bounds (CommitFirst, CommitLast) even when some of its events
// are passed over, so that its last sequence is the cursor to resume from;
// a commit with no selected event is not delivered; BRANCH_DELETED is
// always delivered.
func testSubscribeKinds(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(0)), Kinds: []store.EventKind{store.EventMessageAdded}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: jsonv.ObjectValue()}) // 2
	if _, err := st.ClearMessages(ctx(t), b, store.WriteOptions{}); err != nil {                         // 3
		t.Fatal(err)
	}
	req := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: jsonv.ObjectValue()}).Message.Message // 4
	if _, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: req.ID, Output: jsonv.IntValue(1)}, store.WriteOptions{}); err != nil {
		t.Fatal(err) // 5 added, 6 request replaced
	}
	if _, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{}); err != nil { // 7
		t.Fatal(err)
	}
	var got []uint64
	var bounds [][2]uint64
	for {
		c, err := s.Next(ctx(t))
		if err != nil {
			wantErr(t, err, store.ErrBranchDeleted)
			break
		}
		for _, ev := range c {
			got = append(got, ev.Sequence)
		}
		bounds = append(bounds, [2]uint64{c[0].CommitFirst, c[0].CommitLast})
	}
	if want := []uint64{2, 4, 5, 7}; !slices.Equal(got, want) {
		t.Errorf("filtered sequences %v, want %v", got, want)
	}
	if want := [][2]uint64{{2, 2}, {4, 4}, {5, 6}, {7, 7}}; !slices.Equal(bounds, want) {
		t.Errorf("commit bounds %v, want %v", bounds, want)
	}
	if s.Last() != 7 {
		t.Errorf("Last = %d, want 7", s.Last())
	}
	_, err = st.Subscribe(ctx(t), newBranch(t, st), store.SubscribeInput{Kinds: []store.EventKind{0}})
	wantErr(t, err, envelope.ErrInvalid)
}

// testSubscribeCaughtUp: a heartbeat may carry the head as a cursor only
// when nothing is pending: CaughtUp is true with the head when every
// commit was read or filtered out, false while a commit is buffered or the
// replay is unread, and false once the subscription has ended (what it
// missed is not behind it).
func testSubscribeCaughtUp(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(0)), Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.CaughtUp(); ok {
		t.Error("caught up with the replay unread")
	}
	next(t, s)
	if head, ok := s.CaughtUp(); !ok || head != 1 {
		t.Errorf("CaughtUp = %d, %v; want 1, true", head, ok)
	}
	addInstruction(t, st, b, "a")
	if _, ok := s.CaughtUp(); ok {
		t.Error("caught up with a commit buffered")
	}
	next(t, s)
	if head, ok := s.CaughtUp(); !ok || head != 2 {
		t.Errorf("CaughtUp = %d, %v; want 2, true", head, ok)
	}
	filtered, err := st.Subscribe(ctx(t), b, store.SubscribeInput{Kinds: []store.EventKind{store.EventSystemSet}})
	if err != nil {
		t.Fatal(err)
	}
	defer filtered.Close()
	addInstruction(t, st, b, "b") // 3: passed over by the filter
	if head, ok := filtered.CaughtUp(); !ok || head != 3 {
		t.Errorf("filtered CaughtUp = %d, %v; want 3, true", head, ok)
	}
	addInstruction(t, st, b, "c") // 4: s's buffer of 1 holds 3, so 4 evicts it
	if _, ok := s.CaughtUp(); ok {
		t.Error("an evicted subscription is caught up")
	}
}

// testSubscribeDeleteWhenFull: every subscriber open at a deletion gets
// BRANCH_DELETED as its last commit, after what it had buffered, even when
// its buffer is full (the slot is kept for it), and ends with
// ErrBranchDeleted naming that sequence.
func testSubscribeDeleteWhenFull(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addInstruction(t, st, b, "fills the buffer") // 2
	del, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := next(t, s); c[0].Sequence != 2 {
		t.Fatalf("first commit %d, want 2", c[0].Sequence)
	}
	wantDeletedEnd(t, s, del.LastSequence)
}

// testSubscribeEventsAPI: Replay, Events and Err read the same stream as
// Next (the form a select loop needs): the replay, a chunk per call until
// it returns nil, then live commits, and after the channel closes the
// reason with the cursor to resume from. Commits written while the
// subscription catches up are read from the log, not buffered, so they do
// not count against its buffer (docs/design.md#sequences:
// "The writer never waits for a watcher: each subscriber has a bounded
// buffer"); the buffer bounds how far a live subscriber falls behind.
func testSubscribeEventsAPI(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	addInstruction(t, st, b, "a") // 2
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(1)), Buffer: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Err() != nil {
		t.Errorf("Err of an open subscription = %v", s.Err())
	}
	for i := range 3 { // 3, 4, 5: more than the buffer, written before the replay is read
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	var got []uint64
	for r := s.Replay(); r != nil; r = s.Replay() {
		for _, c := range r {
			got = append(got, c[0].Sequence)
		}
	}
	if !slices.Equal(got, []uint64{2, 3, 4, 5}) {
		t.Errorf("replayed %v, want 2 3 4 5", got)
	}
	for i := range 3 { // live: 6, 7 fill the buffer; 8 evicts
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	got = nil
	for c := range s.Events() {
		got = append(got, c[0].Sequence)
	}
	if !slices.Equal(got, []uint64{6, 7}) {
		t.Errorf("read %v live, want 6 7", got)
	}
	err = s.Err()
	wantErr(t, err, store.ErrSubscriberTooSlow)
	var se *store.SequenceError
	if !errors.As(err, &se) || se.Last != 7 {
		t.Errorf("Err = %v, want last sequence 7", err)
	}
	s.Close()
	if err := s.Err(); !errors.Is(err, store.ErrSubscriberTooSlow) {
		t.Errorf("Close after the end changed the reason to %v", err)
	}
}

// testSubscriptionLimit: past the store's limit of open subscriptions,
// Subscribe is ErrTooManySubscriptions; a subscription holds its place
// until Close, even once it has ended (its reader still holds it), and a
// second Close frees nothing more.
func testSubscriptionLimit(t *testing.T, newStore Factory) {
	st := newStore(t, Options{MaxSubscriptions: 2})
	b := newBranch(t, st)
	first, err := st.Subscribe(ctx(t), b, store.SubscribeInput{Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	second, err := st.Subscribe(ctx(t), b, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Subscribe(ctx(t), b, store.SubscribeInput{})
	wantErr(t, err, store.ErrTooManySubscriptions)
	addInstruction(t, st, b, "a")
	addInstruction(t, st, b, "b") // ends first as too slow; it is not closed yet
	_, err = st.Subscribe(ctx(t), b, store.SubscribeInput{})
	wantErr(t, err, store.ErrTooManySubscriptions)
	first.Close()
	first.Close()
	third, err := st.Subscribe(ctx(t), b, store.SubscribeInput{})
	if err != nil {
		t.Fatalf("after a Close: %v", err)
	}
	_, err = st.Subscribe(ctx(t), b, store.SubscribeInput{})
	wantErr(t, err, store.ErrTooManySubscriptions)
	second.Close()
	third.Close()
}

// readTo reads s until its cursor reaches through, checking that the
// events come in sequence order from after+1 with no gap and no duplicate,
// each commit whole (or the rest of the one after cuts), and returns the
// last sequence read.
func readTo(t *testing.T, s *store.Subscription, after, through uint64) uint64 {
	t.Helper()
	cursor := after
	for cursor < through {
		c := next(t, s)
		if c[0].Sequence != cursor+1 || (c[0].Sequence != c[0].CommitFirst && cursor != after) {
			t.Fatalf("commit %d-%d starts at %d after cursor %d: a gap, a duplicate or a split", c[0].CommitFirst, c[0].CommitLast, c[0].Sequence, cursor)
		}
		for i, ev := range c {
			if ev.Sequence != c[0].Sequence+uint64(i) {
				t.Fatalf("commit %d-%d holds events out of order: %d at %d", ev.CommitFirst, ev.CommitLast, ev.Sequence, i)
			}
		}
		if cursor = c[len(c)-1].Sequence; cursor != c[0].CommitLast {
			t.Fatalf("commit %d-%d cut short at %d", c[0].CommitFirst, c[0].CommitLast, cursor)
		}
	}
	if s.Last() != through {
		t.Fatalf("Last = %d after reading through %d", s.Last(), through)
	}
	return cursor
}

// testSubscribeDeepCatchUp: docs/design.md#sequences: "it
// replays the retained events after the cursor, then goes live with no gap
// and no duplicate", however deep the cursor; and "The writer never waits
// for a watcher": commits written while subscribers are part way through a
// long replay complete at once and are not held against their buffers
// (here 1 commit), and each subscriber then reads them in order after the
// rest of its replay, then live ones.
func testSubscribeDeepCatchUp(t *testing.T, newStore Factory) {
	const backlog, subs, during = 1000, 20, 500
	st := newStore(t, Options{})
	b := newBranch(t, st)
	for i := range backlog {
		if i%50 == 49 { // a two-event commit now and then
			req := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: jsonv.ObjectValue()}).Message.Message
			if _, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: req.ID, Output: jsonv.IntValue(1)}, store.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	var ss []*store.Subscription
	for range subs {
		s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(1)), Buffer: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		readTo(t, s, 1, 2) // part way into its replay
		ss = append(ss, s)
	}
	for i := range during { // the writer does not wait for the 20 replays, nor overflow their buffers of 1
		addInstruction(t, st, b, "during "+strconv.Itoa(i))
	}
	h := head(t, st, b)
	for _, s := range ss {
		readTo(t, s, 2, h)
		if last, ok := s.CaughtUp(); !ok || last != h {
			t.Fatalf("CaughtUp = %d, %v after reading to the head %d", last, ok, h)
		}
	}
	addInstruction(t, st, b, "live")
	for _, s := range ss {
		readTo(t, s, h, h+1)
	}
}

// testSubscribeCatchUpWhileWriting: a writer that runs while subscribers
// with deep cursors catch up is never held up by them (docs/design.md#sequences: "The
// writer never waits for a watcher"), and each subscriber still reads
// every event after its cursor exactly once, in order, across the replay
// and the switch to live; one ended as too slow resumes from its Last
// ("one that falls behind is ended with RESOURCE_EXHAUSTED and its last
// delivered sequence, so it can resume").
func testSubscribeCatchUpWhileWriting(t *testing.T, newStore Factory) {
	const backlog, subs, writes = 1000, 8, 1000
	st := newStore(t, Options{})
	b := newBranch(t, st)
	for i := range backlog {
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	final := uint64(1 + backlog + writes)
	var wg sync.WaitGroup
	for i := range subs {
		wg.Add(1)
		go func() { // owned by this test: wg.Wait
			defer wg.Done()
			cursor := uint64(i) // deep cursors, each a little apart
			for cursor < final {
				s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(cursor)})
				if err != nil {
					t.Errorf("subscriber %d resuming after %d: %v", i, cursor, err)
					return
				}
				for cursor < final {
					c, err := s.Next(ctx(t))
					var se *store.SequenceError
					if errors.As(err, &se) && errors.Is(err, store.ErrSubscriberTooSlow) {
						if se.Last != cursor {
							t.Errorf("subscriber %d ended too slow with Last %d, its cursor is %d", i, se.Last, cursor)
						}
						break
					}
					if err != nil {
						t.Errorf("subscriber %d: %v", i, err)
						s.Close()
						return
					}
					for _, ev := range c {
						if ev.Sequence != cursor+1 {
							t.Errorf("subscriber %d: event %d after %d (a gap or a duplicate)", i, ev.Sequence, cursor)
							s.Close()
							return
						}
						cursor = ev.Sequence
					}
				}
				s.Close()
			}
		}()
	}
	for i := range writes {
		addInstruction(t, st, b, "w"+strconv.Itoa(i))
	}
	wg.Wait()
}

// testSubscribeCatchUpOvertaken: a subscriber catching up whose next
// events the log's retention evicts before it reads them is ended as too
// slow, as one whose buffer overflows is (docs/design.md#sequences: "one that falls
// behind is ended with RESOURCE_EXHAUSTED and its last delivered sequence,
// so it can resume"), after every event it was given, none skipped.
// Resuming from that sequence continues there while it is retained, and
// is ErrHistoryCompacted with the oldest retained sequence once it is not
// ("A cursor older than what is retained ... ends with OUT_OF_RANGE and
// the oldest available sequence — never a silent restart").
func testSubscribeCatchUpOvertaken(t *testing.T, newStore Factory) {
	const retention = 300
	st := newStore(t, Options{EventRetention: retention})
	b := newBranch(t, st)
	for i := range 400 { // head 401, retained 102..401
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(101))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cursor := readTo(t, s, 101, 102)
	for i := range retention { // head 701, retained 402..701: past anything the replay could hold
		addInstruction(t, st, b, "after "+strconv.Itoa(i))
	}
	for {
		c, err := s.Next(ctx(t))
		if err != nil {
			wantErr(t, err, store.ErrSubscriberTooSlow)
			var se *store.SequenceError
			if !errors.As(err, &se) || se.Last != cursor || se.ErrorMetadata()["lastSequence"] != strconv.FormatUint(cursor, 10) {
				t.Fatalf("end %v, want too slow with last sequence %d", err, cursor)
			}
			break
		}
		if c[0].Sequence != cursor+1 {
			t.Fatalf("event %d after %d: a gap", c[0].Sequence, cursor)
		}
		cursor = c[len(c)-1].CommitLast
	}
	if _, ok := s.CaughtUp(); ok {
		t.Error("an ended subscription is caught up")
	}
	h := head(t, st, b)
	oldest := h - retention + 1
	r, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(cursor)})
	if cursor+1 < oldest {
		wantErr(t, err, store.ErrHistoryCompacted)
		var se *store.SequenceError
		if !errors.As(err, &se) || se.Oldest != oldest {
			t.Errorf("resume after %d: %v, want the oldest sequence %d", cursor, err, oldest)
		}
		return
	}
	if err != nil {
		t.Fatalf("resume after %d (retained from %d): %v", cursor, oldest, err)
	}
	defer r.Close()
	readTo(t, r, cursor, h)
}

// testSubscribeDeleteWhileCatchingUp: docs/design.md#sequences / store.Store.Subscribe:
// "every subscriber open when the branch is deleted gets BRANCH_DELETED as
// its last commit and ends with ErrBranchDeleted", also one that is part
// way through a long replay: it reads the rest of the log first.
func testSubscribeDeleteWhileCatchingUp(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b, s := catchingUp(t, st)
	del, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readTo(t, s, 1, del.LastSequence-1)
	wantDeletedEnd(t, s, del.LastSequence)
}

// testSubscribeClosedWhileCatchingUpAfterDelete: a subscription the delete
// ended while it was catching up, and closed before it read BRANCH_DELETED,
// never delivered the delete: it ends as closed, like any subscription
// closed early, not as deleted.
func testSubscribeClosedWhileCatchingUpAfterDelete(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b, s := catchingUp(t, st)
	if _, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for {
		c, err := s.Next(ctx(t))
		if err != nil {
			wantErr(t, err, store.ErrSubscriptionClosed)
			return
		}
		if c[len(c)-1].Kind == store.EventBranchDeleted {
			t.Fatal("a closed subscription went on to deliver BRANCH_DELETED")
		}
	}
}

// catchingUp returns a branch of 301 events and a subscription to it from
// the start, with a buffer of 1, that has read only the first commit: part
// way through a long replay. It is closed when the test ends.
func catchingUp(t *testing.T, st store.Store) (uuid.UUID, *store.Subscription) {
	t.Helper()
	b := newBranch(t, st)
	for i := range 300 {
		addInstruction(t, st, b, strconv.Itoa(i))
	}
	s, err := st.Subscribe(ctx(t), b, store.SubscribeInput{After: ptr(uint64(0)), Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	readTo(t, s, 0, 1)
	return b, s
}

// wantDeletedEnd reads s's last commit, which must be the BRANCH_DELETED
// event at seq alone, and its end: ErrBranchDeleted with seq as the cursor.
func wantDeletedEnd(t *testing.T, s *store.Subscription, seq uint64) {
	t.Helper()
	if c := next(t, s); len(c) != 1 || c[0].Kind != store.EventBranchDeleted || c[0].Sequence != seq {
		t.Fatalf("last commit %+v, want BRANCH_DELETED at %d", c, seq)
	}
	_, err := s.Next(ctx(t))
	wantErr(t, err, store.ErrBranchDeleted)
	var se *store.SequenceError
	if !errors.As(err, &se) || se.Last != seq {
		t.Errorf("end %v, want last sequence %d", err, seq)
	}
}
