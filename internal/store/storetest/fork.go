package storetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// testFork: docs/design.md#branches: ForkBranch copies the messages up to and
// including the given one, the system always, each as a clone (new id,
// metadata.clone_from = source id, sender and recipient unchanged);
// reciprocal action ids are remapped when both ends are copied and cleared
// when only the request is; the selected progression is restricted to the
// copies; the new branch records parent and fork point; exactly one system
// (vector "Branch.clone duplicates the system message" differs).
func testFork(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	src, err := st.CreateBranch(ctx(t), store.CreateBranchInput{System: text("S"), User: ptr("alice"), Name: ptr("src")})
	if err != nil {
		t.Fatal(err)
	}
	b := src.Branch.ID
	i1 := addFactory(t, st, b, store.Factory{Instruction: text("i1"), Sender: text("alice"), Recipient: text("assistant")}).Message.Message
	r1 := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: jsonv.ObjectValue()}).Message.Message
	resp1, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: r1.ID, Output: jsonv.IntValue(1)}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r2 := addFactory(t, st, b, store.Factory{ActionFunction: text("g"), ActionArguments: jsonv.ObjectValue()}).Message.Message
	mid := r2.ID // the fork point: r2 is copied, its response is not
	if _, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: r2.ID}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	addInstruction(t, st, b, "after")
	sel := []uuid.UUID{i1.ID, *src.Branch.SystemID, r2.ID}
	if _, err := st.SetProgression(ctx(t), b, &sel, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	srcOrder := order(t, st, b)

	res, err := st.ForkBranch(ctx(t), store.ForkInput{Source: b, At: &mid, Name: ptr("fork")})
	if err != nil {
		t.Fatal(err)
	}
	f := res.Branch
	if f.ID == b || *f.ParentBranchID != b || *f.ForkPoint != mid || *f.Name != "fork" || *f.User != "alice" || f.HeadSequence != 1 {
		t.Errorf("fork = %+v", f)
	}
	got := order(t, st, f.ID)
	if len(got) != 5 { // system, i1, r1, resp1, r2
		t.Fatalf("fork has %d messages, want 5 (inclusive of the fork point)", len(got))
	}
	systems := 0
	byOrig := map[uuid.UUID]*envelope.Message{}
	for i, id := range got {
		m, _ := st.GetMessage(ctx(t), f.ID, id)
		if m.Message.Kind() == envelope.KindSystem {
			systems++
			if i != 0 {
				t.Errorf("system at index %d", i)
			}
		}
		cf, _ := m.Message.Metadata.Get("clone_from")
		s, _ := cf.Str()
		orig := srcOrder[i]
		if s != orig.String() || id == orig {
			t.Errorf("copy %d: id %s clone_from %q, want a new id cloned from %s", i, id, s, orig)
		}
		srcMsg, _ := st.GetMessage(ctx(t), b, orig)
		if !m.Message.Sender.Equal(srcMsg.Message.Sender) || !m.Message.Recipient.Equal(srcMsg.Message.Recipient) {
			t.Errorf("copy %d changed sender/recipient", i)
		}
		byOrig[orig] = m.Message
	}
	if systems != 1 {
		t.Errorf("fork has %d systems, want exactly 1", systems)
	}
	c1 := byOrig[r1.ID].Content.(*envelope.ActionRequestContent)
	cr := byOrig[resp1.Message.Message.ID].Content.(*envelope.ActionResponseContent)
	if c1.ActionResponseID == nil || *c1.ActionResponseID != byOrig[resp1.Message.Message.ID].ID.String() ||
		cr.ActionRequestID == nil || *cr.ActionRequestID != byOrig[r1.ID].ID.String() {
		t.Errorf("reciprocal ids not remapped: request -> %s, response -> %s", deref(c1.ActionResponseID), deref(cr.ActionRequestID))
	}
	if c2 := byOrig[r2.ID].Content.(*envelope.ActionRequestContent); c2.ActionResponseID != nil {
		t.Errorf("request copied without its response keeps action_response_id %s", *c2.ActionResponseID)
	}
	wantSel := []uuid.UUID{byOrig[i1.ID].ID, byOrig[*src.Branch.SystemID].ID, byOrig[r2.ID].ID}
	if got := ids(t, listAll(t, st, f.ID, store.ListInput{Selected: true})); !sameIDs(got, wantSel) {
		t.Errorf("fork selection = %v, want %v", got, wantSel)
	}
	// The source is untouched.
	if got := order(t, st, b); !sameIDs(got, srcOrder) {
		t.Error("forking changed the source")
	}
	// A whole-branch fork, and an unknown fork point.
	all, err := st.ForkBranch(ctx(t), store.ForkInput{Source: b})
	if err != nil || all.Branch.MessageCount != len(srcOrder) {
		t.Errorf("whole fork: %+v, %v", all.Branch, err)
	}
	missing := uuid.New()
	_, err = st.ForkBranch(ctx(t), store.ForkInput{Source: b, At: &missing})
	wantErr(t, err, store.ErrMessageNotFound)
	_, err = st.ForkBranch(ctx(t), store.ForkInput{Source: b, ID: f.ID})
	wantErr(t, err, store.ErrBranchExists)
	_, err = st.ForkBranch(ctx(t), store.ForkInput{Source: uuid.New()})
	wantErr(t, err, store.ErrBranchNotFound)
	// docs/design.md#optimistic-concurrency: the source's head, when given.
	_, err = st.ForkBranch(ctx(t), store.ForkInput{Source: b, ExpectedHead: ptr(uint64(1))})
	wantErr(t, err, store.ErrSequenceMismatch)
	h := head(t, st, b)
	if _, err := st.ForkBranch(ctx(t), store.ForkInput{Source: b, ExpectedHead: &h}); err != nil {
		t.Errorf("fork at the expected head: %v", err)
	}
}

// testDeleteBranch: a deleted branch is gone (NOT_FOUND), its request id is
// remembered under the branch id, so a repeated delete returns the first
// response.
func testDeleteBranch(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	addInstruction(t, st, b, "x")
	res, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{RequestID: "del"})
	if err != nil || res.LastSequence != 3 {
		t.Fatalf("delete = %+v, %v", res, err)
	}
	again, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{RequestID: "del"})
	if err != nil || !again.Replayed || again.LastSequence != 3 {
		t.Errorf("repeated delete = %+v, %v", again, err)
	}
	_, err = st.DeleteBranch(ctx(t), b, store.WriteOptions{})
	wantErr(t, err, store.ErrBranchNotFound)
	_, err = st.GetBranch(ctx(t), b)
	wantErr(t, err, store.ErrBranchNotFound)
	_, err = st.ListMessages(ctx(t), b, store.ListInput{})
	wantErr(t, err, store.ErrBranchNotFound)
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
