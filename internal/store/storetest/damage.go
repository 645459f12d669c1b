package storetest

import (
	"errors"
	"testing"

	"github.com/historyd/historyd/internal/store"
)

// RememberedResultDamage checks that a remembered result (the requests
// table's result column) that does not decode is damage, as a message row
// that does not decode is: Recall and the repeated call both return
// store.ErrStorageDamaged (DATA_LOSS), not an error of their own (INTERNAL).
// It is a row historyd wrote and cannot read back. It is not a case of Run:
// only a database engine stores results as text to damage.
//
// open returns a store; damage sets the result of op's one record to text
// (a database engine's own SQL) and returns the store to read it with (the
// same, or one opened again); after, when not nil, checks more of that store
// (its health).
func RememberedResultDamage(t *testing.T, open func(t *testing.T) store.Store,
	damage func(t *testing.T, st store.Store, op store.Op, text string) store.Store, after func(t *testing.T, st store.Store)) {
	for _, tc := range []struct {
		name string
		op   store.Op
		text string
	}{
		{"a write's, not JSON", store.OpAddMessage, "{not json"},
		{"a write's, its message not one", store.OpAddMessage, `{"m":{"m":"x","s":1}}`},
		{"a create's, not JSON", store.OpCreateBranch, "{not json"},
		{"a create's, without its branch", store.OpCreateBranch, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			created, err := st.CreateBranch(ctx(t), store.CreateBranchInput{RequestID: "create-1"})
			if err != nil {
				t.Fatal(err)
			}
			id := created.Branch.ID
			add := store.AddInput{Factory: store.Factory{Instruction: text("x")}}
			if _, err := st.AddMessage(ctx(t), id, add, store.WriteOptions{RequestID: "add-1"}); err != nil {
				t.Fatal(err)
			}
			st = damage(t, st, tc.op, tc.text)
			var recalled, repeat error
			if tc.op == store.OpAddMessage {
				_, _, recalled = st.Recall(ctx(t), "", &id, tc.op, "add-1")
				_, repeat = st.AddMessage(ctx(t), id, add, store.WriteOptions{RequestID: "add-1"})
			} else {
				_, _, recalled = st.Recall(ctx(t), "", nil, tc.op, "create-1")
				_, repeat = st.CreateBranch(ctx(t), store.CreateBranchInput{RequestID: "create-1"})
			}
			if !errors.Is(recalled, store.ErrStorageDamaged) {
				t.Errorf("Recall: %v, want the damage", recalled)
			}
			if !errors.Is(repeat, store.ErrStorageDamaged) {
				t.Errorf("the repeated call: %v, want the damage", repeat)
			}
			if after != nil {
				after(t, st)
			}
		})
	}
}
