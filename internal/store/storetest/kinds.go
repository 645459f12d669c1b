package storetest

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// testKindChange: docs/design.md#branches: a message's kind cannot change
// (INVALID_ARGUMENT naming the field). That holds for an update through a
// target whose kind differs from the input's (review M2: it used to update
// the target, ignoring the input), for a pre-built message, a system and
// an import entry under an id of another kind; each error names the
// request field (review MINOR 2), and nothing changes.
func testKindChange(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	sys, err := st.SetSystem(ctx(t), b, envelope.NewSystem("S"), store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sysID := sys.Message.Message.ID
	asst := addFactory(t, st, b, store.Factory{AssistantResponse: text("a")}).Message.Message.ID
	ins := addInstruction(t, st, b, "i").Message.Message.ID
	req := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: jsonv.ObjectValue()}).Message.Message.ID
	instruction := envelope.KindInstruction
	add := func(in store.AddInput) func() error {
		return func() error {
			_, err := st.AddMessage(ctx(t), b, in, store.WriteOptions{})
			return err
		}
	}
	withID := func(k envelope.Kind, id uuid.UUID, content string) *envelope.Message {
		m, err := envelope.New(k, mustJSON(t, `{"id": "`+id.String()+`", "content": `+content+`}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"guidance for an AssistantResponse target", add(store.AddInput{Target: &asst, Factory: store.Factory{Guidance: text("G")}}), "target_id"},
		{"guidance for the system target", add(store.AddInput{Target: &sysID, Factory: store.Factory{Guidance: text("G")}}), "target_id"},
		{"system_datetime for an Instruction target", add(store.AddInput{Target: &ins, Factory: store.Factory{SystemDatetime: text("2025")}}), "target_id"},
		{"function for an Instruction target", add(store.AddInput{Target: &ins, Factory: store.Factory{ActionFunction: text("g"), ActionArguments: jsonv.ObjectValue()}}), "target_id"},
		{"output for an ActionRequest target", add(store.AddInput{Target: &req, Factory: store.Factory{ActionOutput: jsonv.IntValue(1)}}), "target_id"},
		{"an instruction input, empty, for an AssistantResponse target", add(store.AddInput{Target: &asst, TargetKind: &instruction, Factory: store.Factory{Sender: text("bob")}}), "target_id"},
		{"a pre-built message", add(store.AddInput{Message: withID(envelope.KindAssistantResponse, ins, `{"assistant_response": "x"}`)}), "message"},
		{"a system under an instruction's id", func() error {
			_, err := st.SetSystem(ctx(t), b, withID(envelope.KindSystem, ins, `{"system_message": "x"}`), store.WriteOptions{})
			return err
		}, "system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := take(t, st, b)
			err := tc.call()
			wantErr(t, err, store.ErrKindChange)
			if got := invalidField(err); got != tc.field {
				t.Errorf("the error names field %q, want %q (%v)", got, tc.field, err)
			}
			unchanged(t, st, b, snap)
		})
	}

	// The same input for a target of its own kind updates it.
	res, err := st.AddMessage(ctx(t), b, store.AddInput{Target: &ins, TargetKind: &instruction, Factory: store.Factory{Guidance: text("G")}}, store.WriteOptions{})
	if err != nil || res.Message.Message.ID != ins {
		t.Errorf("guidance for an Instruction target = %+v, %v", res, err)
	}

	// An import replays its records through the same rule, and names the entry.
	id := uuid.New().String()
	_, err = st.ImportBranch(ctx(t), store.ImportInput{Data: mustJSON(t, `[
		{"id": "`+id+`", "content": {"instruction": "i"}, "metadata": {"lion_class": "Instruction"}},
		{"id": "`+id+`", "content": {"assistant_response": "a"}, "metadata": {"lion_class": "AssistantResponse"}}]`)})
	wantErr(t, err, store.ErrKindChange)
	if got := invalidField(err); got != "data[1]" {
		t.Errorf("import kind change names field %q, want data[1] (%v)", got, err)
	}
}

// invalidField returns the request field an error names (the interface
// internal/server reads), "" when it names none.
func invalidField(err error) string {
	var fe interface{ InvalidField() string }
	if errors.As(err, &fe) {
		return fe.InvalidField()
	}
	return ""
}

// testMessageErrorsNameFields (review MINOR 2): an input error about a
// message of the branch names the request field that named the message,
// as the wire spells it.
func testMessageErrorsNameFields(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	ins := addInstruction(t, st, b, "i").Message.Message.ID
	stranger := uuid.New()
	for _, tc := range []struct {
		name  string
		call  func() error
		want  error
		field string
	}{
		{"action output for an instruction", func() error {
			_, err := st.AddMessage(ctx(t), b, store.AddInput{ActionRequest: &ins, Factory: store.Factory{ActionOutput: jsonv.IntValue(1)}}, store.WriteOptions{})
			return err
		}, store.ErrNotActionRequest, "action_output.action_request_id"},
		{"action response for an instruction", func() error {
			_, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: ins}, store.WriteOptions{})
			return err
		}, store.ErrNotActionRequest, "action_request_id"},
		{"progression names a stranger", func() error {
			_, err := st.SetProgression(ctx(t), b, &[]uuid.UUID{ins, stranger}, store.WriteOptions{})
			return err
		}, store.ErrInvalidProgression, "progression.ids[1]"},
		{"progression repeats an id", func() error {
			_, err := st.SetProgression(ctx(t), b, &[]uuid.UUID{ins, ins}, store.WriteOptions{})
			return err
		}, store.ErrInvalidProgression, "progression.ids[1]"},
		{"order names a stranger", func() error {
			_, err := st.ToChatMessages(ctx(t), b, store.ChatInput{Order: &[]uuid.UUID{stranger}})
			return err
		}, store.ErrInvalidProgression, "order.ids[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantErr(t, err, tc.want)
			if got := invalidField(err); got != tc.field {
				t.Errorf("the error names field %q, want %q (%v)", got, tc.field, err)
			}
		})
	}
}
