package storetest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// testSequences: docs/design.md#sequences: every change is
// one event with the next sequence from 1 (BRANCH_CREATED); each message
// records its last write's sequence; responses return the head, the reads
// of one message too (review MINOR 10).
func testSequences(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	if h := head(t, st, b); h != 1 {
		t.Fatalf("new branch head = %d, want 1", h)
	}
	i := addInstruction(t, st, b, "i")
	if i.Head != 2 || i.Message.Sequence != 2 {
		t.Errorf("first add: head %d, sequence %d; want 2, 2", i.Head, i.Message.Sequence)
	}
	a := addFactory(t, st, b, store.Factory{AssistantResponse: text("a")})
	upd := addFactory(t, st, b, store.Factory{InstructionMsg: i.Message.Message, Guidance: text("g")})
	if upd.Head != 4 || upd.Message.Sequence != 4 {
		t.Errorf("update: head %d, sequence %d; want 4, 4", upd.Head, upd.Message.Sequence)
	}
	got, _ := st.GetMessage(ctx(t), b, i.Message.Message.ID)
	if got.Sequence != 4 {
		t.Errorf("message records sequence %d, want its last write, 4", got.Sequence)
	}
	got, _ = st.GetMessage(ctx(t), b, a.Message.Message.ID)
	if got.Sequence != 3 {
		t.Errorf("untouched message records sequence %d, want 3", got.Sequence)
	}
	sel := []uuid.UUID{a.Message.Message.ID}
	p, _ := st.SetProgression(ctx(t), b, &sel, store.WriteOptions{})
	c, _ := st.ClearMessages(ctx(t), b, store.WriteOptions{})
	if p.Head != 5 || c.Head != 6 || head(t, st, b) != 6 {
		t.Errorf("progression head %d, clear head %d, branch head %d; want 5, 6, 6", p.Head, c.Head, head(t, st, b))
	}
	last := addInstruction(t, st, b, "last")
	if got, err := st.GetMessage(ctx(t), b, last.Message.Message.ID); err != nil || got.Head != 7 || got.Sequence != 7 {
		t.Errorf("GetMessage = head %d, sequence %d, %v; want 7, 7", got.Head, got.Sequence, err)
	}
	if got, found, err := st.LastMessage(ctx(t), b, store.ViewInstructions); err != nil || !found || got.Head != 7 {
		t.Errorf("LastMessage = head %d, found %v, %v; want 7", got.Head, found, err)
	}
	if got, found, err := st.LastMessage(ctx(t), b, store.ViewActions); err != nil || found || got.Head != 7 {
		t.Errorf("LastMessage of an empty view = head %d, found %v, %v; want the head 7 on a miss too", got.Head, found, err)
	}
}

// testIdempotency: docs/design.md#branches (AIP-155): a repeated request id
// returns the first response and writes nothing, even with another payload;
// the repeat check comes first (before the head check); an id is
// remembered per branch, per principal for the calls that create a branch
// (ADR-0010), for a window of time and of count; an id used by another method is
// refused.
func testIdempotency(t *testing.T, newStore Factory) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	st := newStore(t, Options{Clock: clock, RequestMax: 3})
	b := newBranch(t, st)

	first, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("one")}}, store.WriteOptions{RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	snap := take(t, st, b)
	stale := uint64(0) // a repeat wins over a head check that would fail
	again, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("two")}}, store.WriteOptions{RequestID: "r1", ExpectedHead: &stale})
	if err != nil {
		t.Fatalf("repeat: %v", err)
	}
	if !again.Replayed || again.Message.Message.ID != first.Message.Message.ID || again.Head != first.Head {
		t.Errorf("repeat returned %+v, want the first response %+v", again, first)
	}
	unchanged(t, st, b, snap)
	if r, ok, err := st.Recall(ctx(t), "", &b, store.OpAddMessage, "r1"); !ok || err != nil || r.(store.WriteResult).Message.Message.ID != first.Message.Message.ID {
		t.Errorf("Recall = %v, %v, %v", r, ok, err)
	}
	_, err = st.ClearMessages(ctx(t), b, store.WriteOptions{RequestID: "r1"})
	wantErr(t, err, store.ErrRequestIDReused)
	_, _, err = st.Recall(ctx(t), "", &b, store.OpClearMessages, "r1")
	wantErr(t, err, store.ErrRequestIDReused)

	// Another branch does not share the scope.
	other := newBranch(t, st)
	if res, err := st.AddMessage(ctx(t), other, store.AddInput{Factory: store.Factory{Instruction: text("x")}}, store.WriteOptions{RequestID: "r1"}); err != nil || res.Replayed {
		t.Errorf("same id on another branch: %+v, %v", res, err)
	}

	// The window: after 10 minutes the id is forgotten.
	advance(store.DefaultRequestTTL + time.Second)
	if res, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("three")}}, store.WriteOptions{RequestID: "r1"}); err != nil || res.Replayed {
		t.Errorf("after the window: %+v, %v", res, err)
	}
	// ... and beyond RequestMax newer ids, too. The write above reused an
	// expired id, whose record the SQL engines replace under a new number:
	// the old number becomes a gap, but every record below it is expired
	// too (numbers and times grow together), so the scope still keeps
	// exactly its last RequestMax ids, not one fewer.
	for _, id := range []string{"a", "b", "c", "d"} {
		addWith(t, st, b, id)
	}
	for _, id := range []string{"r1", "a"} {
		if _, ok, err := st.Recall(ctx(t), "", &b, store.OpAddMessage, id); ok || err != nil {
			t.Errorf("Recall(%q), more than RequestMax ids back = %v, %v; want forgotten", id, ok, err)
		}
	}
	for _, id := range []string{"b", "c", "d"} {
		if _, ok, err := st.Recall(ctx(t), "", &b, store.OpAddMessage, id); !ok || err != nil {
			t.Errorf("Recall(%q), one of the last RequestMax ids = %v, %v; want remembered", id, ok, err)
		}
	}
	if res := addWith(t, st, b, "a"); res.Replayed {
		t.Error("the oldest of more than RequestMax ids is still remembered")
	}
	if res := addWith(t, st, b, "d"); !res.Replayed {
		t.Error("a recent id was forgotten")
	}

	// The creating calls' scope (one principal, ""): CreateBranch.
	c1, err := st.CreateBranch(ctx(t), store.CreateBranchInput{RequestID: "create-1", Name: ptr("a")})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := st.CreateBranch(ctx(t), store.CreateBranchInput{RequestID: "create-1", Name: ptr("b")})
	if err != nil || !c2.Replayed || c2.Branch.ID != c1.Branch.ID {
		t.Errorf("repeated create = %+v, %v", c2, err)
	}
	_, err = st.ImportBranch(ctx(t), store.ImportInput{RequestID: "create-1", Data: jsonv.ArrayValue()})
	wantErr(t, err, store.ErrRequestIDReused)
}

func addWith(t *testing.T, st store.Store, b uuid.UUID, requestID string) store.WriteResult {
	t.Helper()
	res, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text(requestID)}}, store.WriteOptions{RequestID: requestID})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// testExpectedHead: docs/design.md#optimistic-concurrency: every branch
// mutation takes an expected head; a mismatch is SEQUENCE_MISMATCH with
// the actual head, and changes nothing.
func testExpectedHead(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	req := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: mustJSON(t, `{}`)}).Message.Message
	h := head(t, st, b)
	wrong := h - 1
	sel := []uuid.UUID{req.ID}
	for name, call := range map[string]func(store.WriteOptions) error{
		"AddMessage": func(o store.WriteOptions) error {
			_, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("x")}}, o)
			return err
		},
		"SetSystem": func(o store.WriteOptions) error {
			_, err := st.SetSystem(ctx(t), b, envelope.NewSystem("s"), o)
			return err
		},
		"CreateActionResponse": func(o store.WriteOptions) error {
			_, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: req.ID}, o)
			return err
		},
		"ClearMessages": func(o store.WriteOptions) error {
			_, err := st.ClearMessages(ctx(t), b, o)
			return err
		},
		"SetProgression": func(o store.WriteOptions) error {
			_, err := st.SetProgression(ctx(t), b, &sel, o)
			return err
		},
		"DeleteBranch": func(o store.WriteOptions) error {
			_, err := st.DeleteBranch(ctx(t), b, o)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			snap := take(t, st, b)
			err := call(store.WriteOptions{ExpectedHead: &wrong})
			wantErr(t, err, store.ErrSequenceMismatch)
			var se *store.SequenceError
			if !errors.As(err, &se) || se.Head != snap.head || se.ErrorMetadata()["headSequence"] == "" {
				t.Errorf("mismatch error %v does not carry the head %d", err, snap.head)
			}
			unchanged(t, st, b, snap)
		})
	}
	// The right head passes.
	h = head(t, st, b)
	if _, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("ok")}}, store.WriteOptions{ExpectedHead: &h}); err != nil {
		t.Errorf("matching head: %v", err)
	}
}

// testMemoryBudget: issue 4: a write that would exceed the memory budget is
// RESOURCE_EXHAUSTED and changes nothing; what deletion frees is usable
// again.
func testMemoryBudget(t *testing.T, newStore Factory) {
	st := newStore(t, Options{MemoryBudget: 256 << 10})
	b := newBranch(t, st)
	addInstruction(t, st, b, "small")
	big := strings.Repeat("x", 512<<10)
	snap := take(t, st, b)
	_, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text(big)}}, store.WriteOptions{})
	wantErr(t, err, store.ErrMemoryBudget)
	unchanged(t, st, b, snap)
	_, err = st.ImportBranch(ctx(t), store.ImportInput{Data: mustJSON(t, `[{"content": {"instruction": "`+big+`"}, "metadata": {"lion_class": "Instruction"}}]`)})
	wantErr(t, err, store.ErrMemoryBudget)

	// Filling the budget with many small writes also stops at it, and a
	// delete gives the room back.
	var filled uuid.UUID
	for i := 0; ; i++ {
		filled = newBranch(t, st)
		_, err := st.AddMessage(ctx(t), filled, store.AddInput{Factory: store.Factory{Instruction: text(strings.Repeat("y", 16<<10))}}, store.WriteOptions{})
		if errors.Is(err, store.ErrMemoryBudget) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 1000 {
			t.Fatal("the budget never refused a write")
		}
	}
	if _, err := st.DeleteBranch(ctx(t), filled, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	page, err := st.ListBranches(ctx(t), store.MaxPageSize, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range page.Branches[:len(page.Branches)/2] {
		if _, err := st.DeleteBranch(ctx(t), info.ID, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreateBranch(ctx(t), store.CreateBranchInput{System: text(strings.Repeat("z", 16<<10))}); err != nil {
		t.Errorf("after deletes freed memory, a create failed: %v", err)
	}
}

// testFailedWritesChangeNothing: issue 4 "Bad input": a failed request
// leaves the branch unchanged, and bad inputs are the documented errors.
func testFailedWritesChangeNothing(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	ins := addInstruction(t, st, b, "i").Message.Message
	missing := uuid.New()
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"unknown target", func() error {
			_, err := st.AddMessage(ctx(t), b, store.AddInput{Target: &missing, Factory: store.Factory{Guidance: text("g")}}, store.WriteOptions{})
			return err
		}, store.ErrMessageNotFound},
		{"kind change", func() error {
			m, _ := envelope.New(envelope.KindAssistantResponse, mustJSON(t, `{"id": "`+ins.ID.String()+`", "content": {}}`))
			_, err := st.AddMessage(ctx(t), b, store.AddInput{Message: m}, store.WriteOptions{})
			return err
		}, store.ErrKindChange},
		{"output for an instruction", func() error {
			_, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: ins.ID, Output: jsonv.IntValue(1)}, store.WriteOptions{})
			return err
		}, store.ErrNotActionRequest},
		{"bad metadata extra", func() error {
			_, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("x"), Metadata: mustJSON(t, `[1]`)}}, store.WriteOptions{})
			return err
		}, envelope.ErrInvalid},
		{"bad handle_context", func() error {
			_, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("x"), Context: text("c"), HandleContext: "sideways"}}, store.WriteOptions{})
			return err
		}, envelope.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := take(t, st, b)
			wantErr(t, tc.call(), tc.want)
			unchanged(t, st, b, snap)
		})
	}
}
