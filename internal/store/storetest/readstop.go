package storetest

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// testEachStopsTheRead: ChatInput.Each and ExportInput.Each (review of the
// read paths, fault 1: a projection or an export past the caller's response
// budget was read whole before it was refused). Each is handed the messages
// the call reads, in its order, counted from 0; ToChatMessages then returns
// no entries; the first error Each returns is the call's, as it is, and no
// message is handed over after it; an export whose Each lets every message
// through is the export without it.
func testEachStopsTheRead(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	s := addFactory(t, st, b, store.Factory{System: text("S")}).Message.Message
	var ins []uuid.UUID
	for _, x := range []string{"1", "2", "3", "4"} {
		ins = append(ins, addInstruction(t, st, b, x).Message.Message.ID)
	}
	full := append([]uuid.UUID{s.ID}, ins...)
	sel := []uuid.UUID{ins[2], s.ID, ins[0]}
	if _, err := st.SetProgression(ctx(t), b, &sel, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	errStop := errors.New("the caller's budget is spent")

	// handed returns Each, which records what it is handed and refuses
	// message stopAt (-1: none), and what it recorded.
	handed := func(stopAt int) (func(int, *envelope.Message) error, *[]uuid.UUID) {
		var got []uuid.UUID
		return func(i int, m *envelope.Message) error {
			if i != len(got) {
				t.Errorf("handed message %d as number %d", len(got), i)
			}
			got = append(got, m.ID)
			if i == stopAt {
				return errStop
			}
			return nil
		}, &got
	}
	for _, tc := range []struct {
		name string
		in   store.ChatInput
		want []uuid.UUID
	}{
		{"full order", store.ChatInput{}, full},
		{"order", store.ChatInput{Order: &[]uuid.UUID{ins[3], ins[1], s.ID}}, []uuid.UUID{ins[3], ins[1], s.ID}},
		{"selected", store.ChatInput{Selected: true}, sel},
	} {
		each, got := handed(-1)
		in := tc.in
		in.Each = each
		res, err := st.ToChatMessages(ctx(t), b, in)
		if err != nil || len(res.Entries) != 0 || !sameIDs(*got, tc.want) || res.Head != head(t, st, b) {
			t.Errorf("ToChatMessages(%s) with Each: handed %v, entries %d, head %d, %v; want %v, none, the head", tc.name, *got, len(res.Entries), res.Head, err, tc.want)
		}
		each, got = handed(1)
		in.Each = each
		if _, err := st.ToChatMessages(ctx(t), b, in); err != errStop { //nolint:errorlint // as it is
			t.Errorf("ToChatMessages(%s): Each's error came back as %v (%T)", tc.name, err, err)
		}
		if !sameIDs(*got, tc.want[:2]) {
			t.Errorf("ToChatMessages(%s): after Each's error at message 1 it was handed %v", tc.name, *got)
		}
	}

	plain, err := st.ExportBranch(ctx(t), b, store.ExportInput{Mode: envelope.ModeJSON})
	if err != nil {
		t.Fatal(err)
	}
	each, got := handed(-1)
	exp, err := st.ExportBranch(ctx(t), b, store.ExportInput{Mode: envelope.ModeJSON, Each: each})
	if err != nil || !sameIDs(*got, full) || !jsonv.Equal(exp.Data, plain.Data) || exp.Head != plain.Head {
		t.Errorf("ExportBranch with Each: handed %v, %v; want the full order %v and the same export", *got, err, full)
	}
	// ExportedLen's sum is a lower bound of the text.
	sum := 0
	for _, id := range full {
		m, err := st.GetMessage(ctx(t), b, id)
		if err != nil {
			t.Fatal(err)
		}
		n, err := store.ExportedLen(m.Message, envelope.ModeJSON)
		if err != nil || n <= 0 {
			t.Fatalf("ExportedLen = %d, %v", n, err)
		}
		sum += n
	}
	if size := jsonv.EncodedLen(plain.Data); sum > size {
		t.Errorf("ExportedLen adds up to %d bytes, more than the export's %d", sum, size)
	}
	each, got = handed(2)
	if _, err := st.ExportBranch(ctx(t), b, store.ExportInput{Mode: envelope.ModeJSON, Each: each}); err != errStop { //nolint:errorlint // as it is
		t.Errorf("ExportBranch: Each's error came back as %v (%T)", err, err)
	}
	if !sameIDs(*got, full[:3]) {
		t.Errorf("ExportBranch: after Each's error at message 2 it was handed %v", *got)
	}
}
