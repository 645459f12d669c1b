package storetest

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// testNULInBranchTexts pins docs/decisions/0012 row 24: a branch's name or user holding U+0000 is
// INVALID_ARGUMENT naming the field on every engine (CreateBranch, ForkBranch, ImportBranch's
// data), and nothing is created; memory and sqlite used to store what PostgreSQL's TEXT refuses.
// Texts inside a message (its content and participants) are stored as JSON and keep their NUL on
// every engine.
func testNULInBranchTexts(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	src := newBranch(t, st)
	nul := "a\x00b"
	id := uuid.New()
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"CreateBranch name", "name", func() error {
			_, err := st.CreateBranch(ctx(t), store.CreateBranchInput{ID: id, Name: &nul})
			return err
		}},
		{"CreateBranch user", "user", func() error {
			_, err := st.CreateBranch(ctx(t), store.CreateBranchInput{ID: id, User: &nul})
			return err
		}},
		{"ForkBranch name", "name", func() error {
			_, err := st.ForkBranch(ctx(t), store.ForkInput{Source: src, ID: id, Name: &nul})
			return err
		}},
		{"ForkBranch name, from a branch that does not exist", "name", func() error {
			// The input is checked before the source is read, on every engine (review of this
			// change: the database engines answered NOT_FOUND, memory INVALID_ARGUMENT).
			_, err := st.ForkBranch(ctx(t), store.ForkInput{Source: uuid.New(), ID: id, Name: &nul})
			return err
		}},
		{"ImportBranch data.name", "data.name", func() error {
			_, err := st.ImportBranch(ctx(t), store.ImportInput{Data: mustJSON(t, `{"id": "`+id.String()+`", "name": "n\u0000", "messages": []}`)})
			return err
		}},
		{"ImportBranch data.user", "data.user", func() error {
			_, err := st.ImportBranch(ctx(t), store.ImportInput{Data: mustJSON(t, `{"id": "`+id.String()+`", "user": "u\u0000", "messages": []}`)})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var fe *envelope.FieldError
			if !errors.Is(err, envelope.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want envelope.ErrInvalid naming %s", err, tc.field)
			}
			if _, err := st.GetBranch(ctx(t), id); !errors.Is(err, store.ErrBranchNotFound) {
				t.Errorf("GetBranch after the refused call: %v, want ErrBranchNotFound", err)
			}
		})
	}

	t.Run("message texts keep their NUL", func(t *testing.T) {
		res := addFactory(t, st, src, store.Factory{Instruction: text("x\x00y"), Sender: text("s\x00t"), Recipient: text("r\x00")})
		got, err := st.GetMessage(ctx(t), src, res.Message.Message.ID)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := res.Message.Message.MarshalJSON()
		if back, _ := got.Message.MarshalJSON(); string(back) != string(want) {
			t.Errorf("read back %s, want %s", back, want)
		}
		if got.Message.Sender.String() != "s\x00t" || got.Message.Recipient.String() != "r\x00" {
			t.Errorf("participants %q, %q", got.Message.Sender.String(), got.Message.Recipient.String())
		}
	})
}
