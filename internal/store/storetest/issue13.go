package storetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
)

// testIssue13ExpectedHeadAhead: issue 13 item 13, DESIGN.md "Optimistic
// concurrency": a mismatch is any expected head that is not the head, so one
// ahead of it is SEQUENCE_MISMATCH too (a check written `<` passes every
// case with a stale head) and changes nothing.
func testIssue13ExpectedHeadAhead(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	addFactory(t, st, b, store.Factory{Instruction: text("one")})
	snap := take(t, st, b)
	for _, ahead := range []uint64{snap.head + 1, snap.head + 1000} {
		_, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("x")}}, store.WriteOptions{ExpectedHead: &ahead})
		wantErr(t, err, store.ErrSequenceMismatch)
		unchanged(t, st, b, snap)
		_, err = st.ForkBranch(ctx(t), store.ForkInput{Source: b, ExpectedHead: &ahead})
		wantErr(t, err, store.ErrSequenceMismatch)
	}
}

// testIssue13RequestIDsAcrossRecreate: issue 13 item 13, DESIGN.md
// "Idempotency": a request id is remembered per branch, and a branch deleted
// and created again under the same id is another branch: its first write
// under a request id the deleted branch used is written, not answered with
// the deleted branch's response.
func testIssue13RequestIDsAcrossRecreate(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	id := uuid.New()
	if _, err := st.CreateBranch(ctx(t), store.CreateBranchInput{ID: id}); err != nil {
		t.Fatal(err)
	}
	first, err := st.AddMessage(ctx(t), id, store.AddInput{Factory: store.Factory{Instruction: text("before")}}, store.WriteOptions{RequestID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteBranch(ctx(t), id, store.WriteOptions{RequestID: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateBranch(ctx(t), store.CreateBranchInput{ID: id}); err != nil {
		t.Fatal(err)
	}
	again, err := st.AddMessage(ctx(t), id, store.AddInput{Factory: store.Factory{Instruction: text("after")}}, store.WriteOptions{RequestID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Replayed || again.Message.Message.ID == first.Message.Message.ID {
		t.Fatalf("the re-created branch answered request id r with the deleted branch's response: %+v", again)
	}
	if got := take(t, st, id); len(got.order) != 1 || got.order[0] != again.Message.Message.ID {
		t.Errorf("re-created branch holds %v, want only the new message %s", got.order, again.Message.Message.ID)
	}
	// The delete's request id does not answer for the new branch either.
	del, err := st.DeleteBranch(ctx(t), id, store.WriteOptions{RequestID: "d"})
	if err != nil || del.Replayed {
		t.Errorf("delete of the re-created branch under the deleted one's request id = %+v, %v", del, err)
	}
	if _, err := st.GetBranch(ctx(t), id); err == nil {
		t.Error("the re-created branch was not deleted")
	}
}
