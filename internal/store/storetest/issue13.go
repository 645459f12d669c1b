package storetest

import (
	"testing"

	"github.com/historyd/historyd/internal/store"
)

// testIssue13ExpectedHeadAhead: issue 13 item 13, docs/design.md#optimistic-concurrency: a mismatch is any expected head that is not the head, so one
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
