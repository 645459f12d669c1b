package storetest

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// testCreateBranch: a branch is created with its identity, user, name and
// metadata; Branch(system=, user=) makes the system with sender = user and
// recipient = the branch id (vector "Branch(system, user)"); BRANCH_CREATED
// is sequence 1 (docs/design.md#sequences); an id that is taken is
// ALREADY_EXISTS; non-object metadata is an error (docs/design.md#envelope).
func testCreateBranch(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	id := uuid.New()
	res, err := st.CreateBranch(ctx(t), store.CreateBranchInput{
		ID: id, Name: ptr("main"), User: ptr("alice"), System: text("You are S"),
		Metadata: mustJSON(t, `{"team": "x"}`), CreatedAt: ptr(1700000000.5),
	})
	if err != nil {
		t.Fatalf("CreateBranch: %v", err)
	}
	b := res.Branch
	if b.ID != id || *b.Name != "main" || *b.User != "alice" || b.CreatedAt != 1700000000.5 || b.HeadSequence != 1 || b.MessageCount != 1 {
		t.Errorf("branch = %+v", b)
	}
	if b.Incarnation == (uuid.UUID{}) || b.SystemID == nil {
		t.Errorf("branch has no incarnation or no system: %+v", b)
	}
	if v, _ := b.Metadata.Get("team"); !jsonv.Equal(v, text("x")) {
		t.Errorf("metadata = %s", b.Metadata)
	}
	sys, err := st.GetMessage(ctx(t), id, *b.SystemID)
	if err != nil {
		t.Fatal(err)
	}
	if sys.Message.Sender.String() != "alice" || sys.Message.Recipient.String() != id.String() {
		t.Errorf("system sender/recipient = %s/%s, want alice/%s", sys.Message.Sender.String(), sys.Message.Recipient.String(), id)
	}
	if sys.Sequence != 1 {
		t.Errorf("system written at sequence %d, want 1 (BRANCH_CREATED)", sys.Sequence)
	}
	_, err = st.CreateBranch(ctx(t), store.CreateBranchInput{ID: id})
	wantErr(t, err, store.ErrBranchExists)

	_, err = st.CreateBranch(ctx(t), store.CreateBranchInput{Metadata: mustJSON(t, `[1]`)})
	wantErr(t, err, envelope.ErrInvalid)

	_, err = st.GetBranch(ctx(t), uuid.New())
	wantErr(t, err, store.ErrBranchNotFound)
	_, err = st.AddMessage(ctx(t), uuid.New(), store.AddInput{}, store.WriteOptions{})
	wantErr(t, err, store.ErrBranchNotFound)

	// Branch(system_datetime=True) with no system adds an empty Instruction
	// (vector "Branch(system_datetime=True) adds an empty Instruction").
	res, err = st.CreateBranch(ctx(t), store.CreateBranchInput{SystemDatetime: jsonv.BoolValue(true)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Branch.SystemID != nil || res.Branch.MessageCount != 1 || res.Messages[0].Message.Kind() != envelope.KindInstruction {
		t.Errorf("Branch(system_datetime=True) = %+v", res)
	}
}

// testSystemPinned: ADR-0006 D3 "Single system": the first system is
// inserted at index 0, a new one replaces it there and excludes the old
// record, re-sending the current system's id updates it in place
// (docs/design.md#branches), and SetSystem wants a System.
func testSystemPinned(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	i1 := addInstruction(t, st, b, "I1").Message.Message
	s1 := addFactory(t, st, b, store.Factory{System: text("S1")})
	if s1.Index != 0 {
		t.Errorf("first system written at index %d, want 0", s1.Index)
	}
	if got := order(t, st, b); !sameIDs(got, []uuid.UUID{s1.Message.Message.ID, i1.ID}) {
		t.Fatalf("order = %v", got)
	}
	s2, err := envelope.New(envelope.KindSystem, mustJSON(t, `{"content": {"system_message": "S2"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetSystem(ctx(t), b, s2, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := order(t, st, b); !sameIDs(got, []uuid.UUID{s2.ID, i1.ID}) {
		t.Fatalf("after replacing the system, order = %v", got)
	}
	_, err = st.GetMessage(ctx(t), b, s1.Message.Message.ID)
	wantErr(t, err, store.ErrMessageNotFound)

	// The same id again: an update in place, not a second system.
	s2b, _ := s2.Update(mustJSON(t, `{"system_message": "S2b"}`))
	if _, err := st.SetSystem(ctx(t), b, s2b, store.WriteOptions{}); err != nil {
		t.Fatalf("SetSystem with the current system's id: %v", err)
	}
	got, _ := st.GetMessage(ctx(t), b, s2.ID)
	if r, _ := got.Message.Render(); r.Text != "S2b" {
		t.Errorf("system text = %q, want S2b", r.Text)
	}
	info, _ := st.GetBranch(ctx(t), b)
	if info.MessageCount != 2 || *info.SystemID != s2.ID {
		t.Errorf("branch = %+v", info)
	}

	// A System kind under an instruction's id is a kind change; a
	// non-System to SetSystem is refused.
	bad := s2.WithID(i1.ID)
	_, err = st.SetSystem(ctx(t), b, bad, store.WriteOptions{})
	wantErr(t, err, store.ErrKindChange)
	_, err = st.SetSystem(ctx(t), b, i1, store.WriteOptions{})
	wantErr(t, err, store.ErrNotSystem)
}

// testAddOrReplace: ADR-0006 D3 "Add or replace": an id already present is
// replaced at the same index, a new one is appended; the factory updates a
// named message (add_message(instruction=<existing>, ...)); a kind change
// is refused (docs/design.md#branches); an unknown target is NOT_FOUND.
func testAddOrReplace(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	a := addInstruction(t, st, b, "a").Message.Message
	r := addFactory(t, st, b, store.Factory{AssistantResponse: text("r")}).Message.Message
	c := addInstruction(t, st, b, "c").Message.Message

	// A pre-built message with a's id replaces it at index 0.
	a2, _ := a.Update(mustJSON(t, `{"guidance": "G"}`))
	res, err := st.AddMessage(ctx(t), b, store.AddInput{Message: a2}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Index != 0 {
		t.Errorf("replaced at index %d, want 0", res.Index)
	}
	if got := order(t, st, b); !sameIDs(got, []uuid.UUID{a.ID, r.ID, c.ID}) {
		t.Fatalf("order = %v", got)
	}

	// The factory extends the context of the named instruction in place.
	res, err = st.AddMessage(ctx(t), b, store.AddInput{Target: &c.ID, Factory: store.Factory{Context: mustJSON(t, `["more"]`)}}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Index != 2 || res.Message.Message.ID != c.ID {
		t.Errorf("update wrote %s at %d", res.Message.Message.ID, res.Index)
	}
	if r, _ := res.Message.Message.Render(); r.Text != "Instruction: c\nContext:\n- more" {
		t.Errorf("rendered = %q", r.Text)
	}

	// A kind change is refused.
	bad, _ := envelope.New(envelope.KindAssistantResponse, mustJSON(t, `{"id": "`+c.ID.String()+`", "content": {}}`))
	_, err = st.AddMessage(ctx(t), b, store.AddInput{Message: bad}, store.WriteOptions{})
	wantErr(t, err, store.ErrKindChange)
	var me *store.MessageError
	if !errors.As(err, &me) || me.MessageID != c.ID {
		t.Errorf("kind change error %v does not name the message", err)
	}

	missing := uuid.New()
	_, err = st.AddMessage(ctx(t), b, store.AddInput{Target: &missing, Factory: store.Factory{Guidance: text("g")}}, store.WriteOptions{})
	wantErr(t, err, store.ErrMessageNotFound)
}

// testFactoryErrors: ADR-0006 D3 "Factory selection": conflicting kinds are
// "Only one message type can be added at a time."; an action output needs
// its request; a pre-built message excludes factory inputs.
func testFactoryErrors(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	for _, tc := range []struct {
		name string
		in   store.AddInput
		want error
	}{
		{"instruction+system", store.AddInput{Factory: store.Factory{Instruction: text("x"), System: text("y")}}, store.ErrOneMessageType},
		{"instruction+assistant", store.AddInput{Factory: store.Factory{Instruction: text("x"), AssistantResponse: text("y")}}, store.ErrOneMessageType},
		{"output without request", store.AddInput{Factory: store.Factory{ActionOutput: jsonv.IntValue(1)}}, store.ErrNoActionRequest},
		{"message and factory", store.AddInput{Message: envelope.NewSystem("s"), Factory: store.Factory{Instruction: text("x")}}, store.ErrOneMessageType},
		{"bad handle_context", store.AddInput{Factory: store.Factory{Instruction: text("x"), Context: text("c"), HandleContext: "bogus"}}, envelope.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := take(t, st, b)
			_, err := st.AddMessage(ctx(t), b, tc.in, store.WriteOptions{})
			wantErr(t, err, tc.want)
			if errors.Is(tc.want, store.ErrOneMessageType) && err.Error() != "invalid input: "+store.OneMessageTypeMessage {
				t.Errorf("error text = %q", err.Error())
			}
			unchanged(t, st, b, before)
		})
	}
	// Falsy action outputs still create a response (ADR-0006 D3: "is not None").
	req := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: mustJSON(t, `{}`)}).Message.Message
	for _, out := range []string{`0`, `""`, `[]`, `{}`, `false`} {
		res, err := st.AddMessage(ctx(t), b, store.AddInput{ActionRequest: &req.ID, Factory: store.Factory{ActionOutput: mustJSON(t, out)}}, store.WriteOptions{})
		if err != nil || res.Message.Message.Kind() != envelope.KindActionResponse {
			t.Errorf("action_output=%s: %v %v", out, res.Message.Message, err)
		}
	}
	// A null output that was given (not LionAGI's None) is a response too.
	res, err := st.AddMessage(ctx(t), b, store.AddInput{ActionRequest: &req.ID, Factory: store.Factory{ActionOutputSet: true}}, store.WriteOptions{})
	if err != nil || res.Message.Message.Kind() != envelope.KindActionResponse {
		t.Errorf("action_output=null (set): %v %v", res.Message.Message, err)
	}
}

// testViews: ADR-0006 D3 "Typed views": instructions, assistant responses,
// actions, action requests, action responses in order; last_instruction
// and last_response, None on a miss.
func testViews(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	for _, view := range []store.View{store.ViewInstructions, store.ViewAssistantResponses} {
		if _, found, err := st.LastMessage(ctx(t), b, view); err != nil || found {
			t.Errorf("LastMessage(%v) on an empty branch = %v, %v; want a miss", view, found, err)
		}
	}
	addFactory(t, st, b, store.Factory{System: text("S")})
	i1 := addInstruction(t, st, b, "i1").Message.Message
	a1 := addFactory(t, st, b, store.Factory{AssistantResponse: text("a1")}).Message.Message
	req := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: mustJSON(t, `{"x": 1}`)}).Message.Message
	resp, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: req.ID, Output: jsonv.IntValue(2)}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	i2 := addInstruction(t, st, b, "i2").Message.Message
	a2 := addFactory(t, st, b, store.Factory{AssistantResponse: text("a2")}).Message.Message
	respID := resp.Message.Message.ID
	for _, tc := range []struct {
		view store.View
		want []uuid.UUID
	}{
		{store.ViewInstructions, []uuid.UUID{i1.ID, i2.ID}},
		{store.ViewAssistantResponses, []uuid.UUID{a1.ID, a2.ID}},
		{store.ViewActions, []uuid.UUID{req.ID, respID}},
		{store.ViewActionRequests, []uuid.UUID{req.ID}},
		{store.ViewActionResponses, []uuid.UUID{respID}},
	} {
		if got := ids(t, listAll(t, st, b, store.ListInput{View: tc.view})); !sameIDs(got, tc.want) {
			t.Errorf("%v = %v, want %v", tc.view, got, tc.want)
		}
		desc := ids(t, listAll(t, st, b, store.ListInput{View: tc.view, Descending: true}))
		if len(desc) != len(tc.want) || desc[0] != tc.want[len(tc.want)-1] {
			t.Errorf("%v descending = %v", tc.view, desc)
		}
	}
	if m, found, _ := st.LastMessage(ctx(t), b, store.ViewInstructions); !found || m.Message.ID != i2.ID {
		t.Errorf("last_instruction = %v", m.Message)
	}
	if m, found, _ := st.LastMessage(ctx(t), b, store.ViewAssistantResponses); !found || m.Message.ID != a2.ID {
		t.Errorf("last_response = %v", m.Message)
	}
	_, err = st.ListMessages(ctx(t), b, store.ListInput{View: store.ViewInstructions, Selected: true})
	wantErr(t, err, envelope.ErrInvalid)
}

// testToChatMessages: ADR-0006 D3 "Raw projection": the full order, a
// supplied order, an explicitly empty one; an unknown id fails the call
// with D3's text.
func testToChatMessages(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	addFactory(t, st, b, store.Factory{System: text("S")})
	i1 := addInstruction(t, st, b, "I1").Message.Message
	a1 := addFactory(t, st, b, store.Factory{AssistantResponse: text("A1")}).Message.Message

	chat := func(in store.ChatInput) []string {
		t.Helper()
		res, err := st.ToChatMessages(ctx(t), b, in)
		if err != nil {
			t.Fatalf("ToChatMessages: %v", err)
		}
		var out []string
		for _, e := range res.Entries {
			out = append(out, string(e.Chat.Role)+":"+e.Chat.Content.Text)
		}
		return out
	}
	if got := chat(store.ChatInput{}); len(got) != 3 || got[0] != "system:S" || got[1] != "user:Instruction: I1" || got[2] != "assistant:A1" {
		t.Errorf("full = %q", got)
	}
	if got := chat(store.ChatInput{Order: &[]uuid.UUID{a1.ID, i1.ID}}); len(got) != 2 || got[0] != "assistant:A1" {
		t.Errorf("supplied = %q", got)
	}
	if got := chat(store.ChatInput{Order: &[]uuid.UUID{}}); len(got) != 0 {
		t.Errorf("explicitly empty = %q", got)
	}
	_, err := st.ToChatMessages(ctx(t), b, store.ChatInput{Order: &[]uuid.UUID{i1.ID, uuid.New()}})
	wantErr(t, err, store.ErrInvalidProgression)
	if err == nil || !containsText(err.Error(), store.InvalidProgressionMessage) {
		t.Errorf("error %v lacks D3's text", err)
	}
}

func containsText(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// testSelectedProgression: ADR-0006 D3: Branch.progression may be a
// selected subset; selecting never deletes records; members only, once
// (the ErrorReason's "repeated id"); listings and projections can use it;
// set and empty it selects nothing; nil unsets it.
func testSelectedProgression(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	s := addFactory(t, st, b, store.Factory{System: text("S")}).Message.Message
	i1 := addInstruction(t, st, b, "1").Message.Message
	i2 := addInstruction(t, st, b, "2").Message.Message
	i3 := addInstruction(t, st, b, "3").Message.Message

	sel := []uuid.UUID{s.ID, i3.ID, i1.ID}
	if _, err := st.SetProgression(ctx(t), b, &sel, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := order(t, st, b); !sameIDs(got, []uuid.UUID{s.ID, i1.ID, i2.ID, i3.ID}) {
		t.Errorf("selecting deleted records: full order = %v", got)
	}
	if got := ids(t, listAll(t, st, b, store.ListInput{Selected: true, PageSize: 2})); !sameIDs(got, sel) {
		t.Errorf("selected listing = %v, want %v", got, sel)
	}
	res, err := st.ToChatMessages(ctx(t), b, store.ChatInput{Selected: true})
	if err != nil || len(res.Entries) != 3 || res.Entries[1].MessageID != i3.ID {
		t.Errorf("selected projection = %+v, %v", res.Entries, err)
	}
	if info, _ := st.GetBranch(ctx(t), b); !info.Selected {
		t.Error("branch does not report its selection")
	}

	// Replacing the system keeps the selection pointing at index 0's record.
	s2 := envelope.NewSystem("S2")
	if _, err := st.SetSystem(ctx(t), b, s2, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, listAll(t, st, b, store.ListInput{Selected: true})); !sameIDs(got, []uuid.UUID{s2.ID, i3.ID, i1.ID}) {
		t.Errorf("after a system change, selected = %v", got)
	}

	for _, bad := range [][]uuid.UUID{{i1.ID, uuid.New()}, {i1.ID, i1.ID}} {
		before := take(t, st, b)
		_, err := st.SetProgression(ctx(t), b, &bad, store.WriteOptions{})
		wantErr(t, err, store.ErrInvalidProgression)
		unchanged(t, st, b, before)
	}
	// A selected progression that is set but empty selects nothing: it is not read as unset
	// (docs/decisions/0003).
	if _, err := st.SetProgression(ctx(t), b, &[]uuid.UUID{}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, err := st.ToChatMessages(ctx(t), b, store.ChatInput{Selected: true}); err != nil || len(res.Entries) != 0 {
		t.Errorf("projection of an empty selected progression = %d entries, %v; want none", len(res.Entries), err)
	}
	if got := ids(t, listAll(t, st, b, store.ListInput{Selected: true})); len(got) != 0 {
		t.Errorf("listing of an empty selected progression = %v, want none", got)
	}
	if _, err := st.SetProgression(ctx(t), b, nil, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, listAll(t, st, b, store.ListInput{Selected: true})); len(got) != 4 {
		t.Errorf("after unsetting, selected listing = %v, want the full order", got)
	}
}

// testActionResponse: ADR-0006 D2 "New response correlation": the
// response copies function and arguments and stores the request id; the
// request stores the response id; two events with consecutive sequences
// (docs/design.md#branches); only an ActionRequest can be answered.
func testActionResponse(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	req := addFactory(t, st, b, store.Factory{ActionFunction: text("add"), ActionArguments: mustJSON(t, `{"a": 1, "b": 2}`)}).Message.Message
	before := head(t, st, b)
	res, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: req.ID, Output: jsonv.IntValue(3), Error: ptr("warn")}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := res.Message.Message.Content.(*envelope.ActionResponseContent)
	if rc.Function != "add" || *rc.ActionRequestID != req.ID.String() || rc.Error == nil || *rc.Error != "warn" {
		t.Errorf("response content = %+v", rc)
	}
	if res.Updated == nil {
		t.Fatal("the request was not updated")
	}
	q := res.Updated.Message.Content.(*envelope.ActionRequestContent)
	if q.ActionResponseID == nil || *q.ActionResponseID != res.Message.Message.ID.String() {
		t.Errorf("request action_response_id = %v", q.ActionResponseID)
	}
	if res.Message.Sequence != before+1 || res.Updated.Sequence != before+2 || res.Head != before+2 {
		t.Errorf("sequences: response %d, request %d, head %d; want %d, %d, %d", res.Message.Sequence, res.Updated.Sequence, res.Head, before+1, before+2, before+2)
	}
	stored, _ := st.GetMessage(ctx(t), b, req.ID)
	if !stored.Message.Content.(*envelope.ActionRequestContent).IsResponded() {
		t.Error("stored request is not responded")
	}

	ins := addInstruction(t, st, b, "x").Message.Message
	snap := take(t, st, b)
	_, err = st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: ins.ID}, store.WriteOptions{})
	wantErr(t, err, store.ErrNotActionRequest)
	_, err = st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: uuid.New()}, store.WriteOptions{})
	wantErr(t, err, store.ErrMessageNotFound)
	_, err = st.AddMessage(ctx(t), b, store.AddInput{ActionRequest: &ins.ID, Factory: store.Factory{ActionOutput: jsonv.IntValue(1)}}, store.WriteOptions{})
	wantErr(t, err, store.ErrNotActionRequest)
	unchanged(t, st, b, snap)
}

// testClearMessages: ADR-0006 D3: clear_messages clears the pile and puts
// the current system back at index 0; the selection keeps what survives.
func testClearMessages(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	s := addFactory(t, st, b, store.Factory{System: text("S")}).Message.Message
	i := addInstruction(t, st, b, "i").Message.Message
	sel := []uuid.UUID{i.ID, s.ID}
	if _, err := st.SetProgression(ctx(t), b, &sel, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := st.ClearMessages(ctx(t), b, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := order(t, st, b); !sameIDs(got, []uuid.UUID{s.ID}) {
		t.Errorf("after clear, order = %v", got)
	}
	if got := ids(t, listAll(t, st, b, store.ListInput{Selected: true})); !sameIDs(got, []uuid.UUID{s.ID}) {
		t.Errorf("after clear, selected = %v", got)
	}
	if res.Head != head(t, st, b) {
		t.Errorf("clear returned head %d", res.Head)
	}
	if _, found, _ := st.LastMessage(ctx(t), b, store.ViewInstructions); found {
		t.Error("an instruction survived the clear")
	}
	n := addInstruction(t, st, b, "after")
	if n.Index != 1 {
		t.Errorf("first message after a clear at index %d, want 1", n.Index)
	}
}
