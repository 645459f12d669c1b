package server

import (
	"google.golang.org/protobuf/proto"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestHistoryAddMessageInputs: AddMessage's inputs (ADR-0006 D3 factory; docs/design.md#branches):
// an instruction with context, an assistant response from an OpenAI-shaped raw response
// (from_response: text, metadata.model_response), a system (index 0), an action request and its
// output (reciprocal ids on both records, ADR-0006 D2), a target update in place, metadata into
// metadata.extra, a pre-built message.
func TestHistoryAddMessageInputs(t *testing.T) {
	f := newHistoryFixture(t)
	b := f.create(t, nil)

	meta, _ := structpb.NewStruct(map[string]any{"k": "v"})
	ins := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Sender: sval("user"), Recipient: sval("assistant"), Metadata: meta, IncludeRendered: true,
		Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "Add 30 and 12"},
			ContextJson:      []string{`{"a": 30, "b": 12.0}`},
		}}})
	m := ins.GetMessage()
	if m.GetRole() != historyv1.MessageRole_MESSAGE_ROLE_USER || m.GetSender().GetStringValue() != "user" ||
		m.GetRendered().GetText() != "Instruction: Add 30 and 12\nContext:\n- a: 30\n  b: 12.0" || ins.GetIndex() != 0 || m.GetSequence() != 2 ||
		m.GetMetadata().GetFields()["extra"].GetStructValue().GetFields()["k"].GetStringValue() != "v" {
		t.Errorf("instruction = %v (index %d)", m, ins.GetIndex())
	}

	asst := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
		Response: &historyv1.AssistantResponseInput_RawResponseJson{RawResponseJson: `{"id": "chatcmpl-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "I will call add."}}]}`},
	}}}).GetMessage()
	if asst.GetAssistantResponse().GetAssistantResponse() != "I will call add." || asst.GetMetadata().GetFields()["model_response"].GetStructValue() == nil {
		t.Errorf("assistant response = %v", asst)
	}

	sys := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_System{System: &historyv1.SystemInput{SystemMessage: strPtr("Be brief.")}}})
	if sys.GetIndex() != 0 || sys.GetMessage().GetRole() != historyv1.MessageRole_MESSAGE_ROLE_SYSTEM {
		t.Errorf("system written at %d: %v", sys.GetIndex(), sys.GetMessage())
	}

	req := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{
		Function: "add", ArgumentsJson: `{"a": 30, "b": 12}`}}}).GetMessage()
	out := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{
		ActionRequestId: req.GetId(), OutputJson: strPtr("42")}}})
	resp := out.GetMessage().GetActionResponse()
	if resp.GetActionRequestId() != req.GetId() || resp.GetOutputJson() != "42" || resp.GetFunction() != "add" ||
		out.GetUpdatedRequest().GetActionRequest().GetActionResponseId() != out.GetMessage().GetId() ||
		out.GetUpdatedRequest().GetSequence() != out.GetMessage().GetSequence()+1 || out.GetHeadSequence() != out.GetUpdatedRequest().GetSequence() {
		t.Errorf("action output = %v", out)
	}

	// The target's context is extended in place, at its index.
	upd := f.add(t, &historyv1.AddMessageRequest{BranchId: b, TargetId: m.GetId(), Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		ContextJson: []string{`"more"`}}}})
	if upd.GetMessage().GetId() != m.GetId() || upd.GetIndex() != 1 || len(upd.GetMessage().GetInstruction().GetPromptContextJson()) != 2 {
		t.Errorf("target update = %v (index %d)", upd.GetMessage(), upd.GetIndex())
	}

	// A pre-built message.
	pre := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Message{Message: &historyv1.Message{
		Content: &historyv1.Message_Generic{Generic: &historyv1.GenericContent{ContentJson: strPtr(`{"note": 1}`)}},
	}}}).GetMessage()
	if pre.GetRole() != historyv1.MessageRole_MESSAGE_ROLE_UNSET {
		t.Errorf("pre-built = %v", pre)
	}
	got := f.ids(t, b, nil)
	want := []string{sys.GetMessage().GetId(), m.GetId(), asst.GetId(), req.GetId(), out.GetMessage().GetId(), pre.GetId()}
	if joinIDs(got) != joinIDs(want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

func joinIDs(ids []string) string {
	s := ""
	for _, id := range ids {
		s += id + ","
	}
	return s
}

// TestHistoryReadRPCs: GetMessage, ListMessages (views, both directions, pages, the selected
// progression), GetLastMessage (hit and miss: ADR-0006 D3 last_instruction/last_response),
// ToChatMessages (full, supplied, explicitly empty, selected), SetProgression, ClearMessages,
// SetProgression unset, SetSystem, CreateActionResponse.
func TestHistoryReadRPCs(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, &historyv1.CreateBranchRequest{System: &historyv1.SystemInput{SystemMessage: strPtr("S")}})
	miss, err := f.c.GetLastMessage(ctx, &historyv1.GetLastMessageRequest{BranchId: b, View: historyv1.MessageView_MESSAGE_VIEW_ASSISTANT_RESPONSES})
	if err != nil || miss.GetMessage() != nil || miss.GetHeadSequence() != 1 {
		t.Errorf("last_response on no responses = %v, %v; want no message, and the head 1", miss, err)
	}
	var ins []string
	for i := range 5 {
		ins = append(ins, f.instruction(t, b, "i"+strconv.Itoa(i)).GetId())
	}
	req := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "f"}}}).GetMessage()
	car, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: req.GetId(), OutputJson: strPtr(`{"ok": true}`), Error: strPtr("partial")})
	if err != nil {
		t.Fatal(err)
	}
	if car.GetActionResponse().GetActionResponse().GetError() != "partial" || car.GetActionRequest().GetActionRequest().GetActionResponseId() != car.GetActionResponse().GetId() {
		t.Errorf("CreateActionResponse = %v", car)
	}

	gm, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: ins[2]})
	if err != nil || gm.GetMessage().GetInstruction().GetInstruction() != "i2" || gm.GetHeadSequence() != car.GetHeadSequence() {
		t.Errorf("GetMessage = %v, %v; want the head %d too (review MINOR 10)", gm, err, car.GetHeadSequence())
	}
	if got := f.ids(t, b, &historyv1.ListMessagesRequest{View: historyv1.MessageView_MESSAGE_VIEW_INSTRUCTIONS, PageSize: 2}); joinIDs(got) != joinIDs(ins) {
		t.Errorf("instructions = %v", got)
	}
	if got := f.ids(t, b, &historyv1.ListMessagesRequest{View: historyv1.MessageView_MESSAGE_VIEW_ACTIONS, Descending: true}); len(got) != 2 || got[1] != req.GetId() {
		t.Errorf("actions descending = %v", got)
	}
	all := f.ids(t, b, &historyv1.ListMessagesRequest{PageSize: 3})
	if len(all) != 8 {
		t.Errorf("full order has %d messages, want 8", len(all))
	}
	last, err := f.c.GetLastMessage(ctx, &historyv1.GetLastMessageRequest{BranchId: b, View: historyv1.MessageView_MESSAGE_VIEW_INSTRUCTIONS})
	if err != nil || last.GetMessage().GetId() != ins[4] || last.GetHeadSequence() != car.GetHeadSequence() {
		t.Errorf("last_instruction = %v, %v; want the head %d too", last, err, car.GetHeadSequence())
	}

	chat, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b})
	if err != nil || len(chat.GetMessages()) != 8 || chat.GetMessages()[0].GetRole() != "system" || chat.GetMessages()[0].GetText() != "S" ||
		chat.GetMessageIds()[1] != ins[0] || chat.GetRenderErrors()[1] != "" {
		t.Errorf("ToChatMessages = %v, %v", chat, err)
	}
	chat, err = f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Order: &historyv1.MessageIds{Ids: []string{ins[3], ins[1]}}})
	if err != nil || len(chat.GetMessages()) != 2 || chat.GetMessages()[0].GetText() != "Instruction: i3" {
		t.Errorf("ToChatMessages(order) = %v, %v", chat, err)
	}
	chat, err = f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Order: &historyv1.MessageIds{}})
	if err != nil || len(chat.GetMessages()) != 0 {
		t.Errorf("ToChatMessages(empty order) = %v, %v", chat, err)
	}

	sel := []string{all[0], ins[4], ins[0]}
	sp, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: b, Progression: &historyv1.MessageIds{Ids: sel}})
	if err != nil || sp.GetHeadSequence() != f.head(t, b) {
		t.Fatalf("SetProgression = %v, %v", sp, err)
	}
	if got := f.ids(t, b, &historyv1.ListMessagesRequest{Selected: true, PageSize: 1}); joinIDs(got) != joinIDs(sel) {
		t.Errorf("selected = %v, want %v", got, sel)
	}
	chat, err = f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Selected: true})
	if err != nil || len(chat.GetMessages()) != 3 || chat.GetMessages()[1].GetText() != "Instruction: i4" {
		t.Errorf("ToChatMessages(selected) = %v, %v", chat, err)
	}
	if gb, _ := f.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: b}); !gb.GetBranch().GetProgressionSelected() || gb.GetBranch().GetMessageCount() != 8 {
		t.Errorf("branch after selecting = %v (selecting must not delete)", gb.GetBranch())
	}

	ss, err := f.c.SetSystem(ctx, &historyv1.SetSystemRequest{BranchId: b, IncludeRendered: true, System: &historyv1.Message{
		Content: &historyv1.Message_System{System: &historyv1.SystemContent{SystemMessage: strPtr("S2")}}}})
	if err != nil || ss.GetSystem().GetRendered().GetText() != "S2" {
		t.Fatalf("SetSystem = %v, %v", ss, err)
	}
	cl, err := f.c.ClearMessages(ctx, &historyv1.ClearMessagesRequest{BranchId: b})
	if err != nil || cl.GetHeadSequence() != f.head(t, b) {
		t.Fatalf("ClearMessages = %v, %v", cl, err)
	}
	if got := f.ids(t, b, nil); len(got) != 1 || got[0] != ss.GetSystem().GetId() {
		t.Errorf("after clear = %v, want only the system", got)
	}
	if got := f.ids(t, b, &historyv1.ListMessagesRequest{Selected: true}); len(got) != 1 || got[0] != ss.GetSystem().GetId() {
		t.Errorf("selection after clear = %v", got)
	}
	if _, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: b}); err != nil {
		t.Fatal(err)
	}
	if gb, _ := f.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: b}); gb.GetBranch().GetProgressionSelected() {
		t.Error("SetProgression without a progression did not unset it")
	}
}

// TestHistoryForkAtMiddle: docs/design.md#branches: ForkBranch at a middle message copies up to and
// including it, with one system; reciprocal action ids are remapped when both ends are copied and
// cleared when only the request is; the new branch records parent_branch_id and fork_point.
func TestHistoryForkAtMiddle(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, &historyv1.CreateBranchRequest{System: &historyv1.SystemInput{}, User: strPtr("alice")})
	f.instruction(t, b, "first")
	r1 := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "f"}}}).GetMessage()
	o1, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: r1.GetId(), OutputJson: strPtr("1")})
	if err != nil {
		t.Fatal(err)
	}
	r2 := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "g"}}}).GetMessage()
	if _, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: r2.GetId()}); err != nil {
		t.Fatal(err)
	}
	f.instruction(t, b, "last")

	fk, err := f.c.ForkBranch(ctx, &historyv1.ForkBranchRequest{BranchId: b, MessageId: r2.GetId(), Name: strPtr("what-if")})
	if err != nil {
		t.Fatal(err)
	}
	nb := fk.GetBranch()
	if nb.GetParentBranchId() != b || nb.GetForkPoint() != r2.GetId() || nb.GetName() != "what-if" || nb.GetUser() != "alice" || nb.GetMessageCount() != 5 {
		t.Errorf("fork = %v", nb)
	}
	list, err := f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: nb.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	systems := 0
	byOrig := map[string]*historyv1.Message{}
	for _, m := range list.GetMessages() {
		if m.GetRole() == historyv1.MessageRole_MESSAGE_ROLE_SYSTEM {
			systems++
		}
		byOrig[m.GetMetadata().GetFields()["clone_from"].GetStringValue()] = m
	}
	if systems != 1 || len(byOrig) != 5 {
		t.Errorf("fork holds %d systems and %d clones: %v", systems, len(byOrig), list.GetMessages())
	}
	c1, co1, c2 := byOrig[r1.GetId()], byOrig[o1.GetActionResponse().GetId()], byOrig[r2.GetId()]
	if c1.GetActionRequest().GetActionResponseId() != co1.GetId() || co1.GetActionResponse().GetActionRequestId() != c1.GetId() {
		t.Errorf("ids not remapped: %v / %v", c1, co1)
	}
	if c2.GetActionRequest().ActionResponseId != nil {
		t.Errorf("a request copied without its response keeps %q", c2.GetActionRequest().GetActionResponseId())
	}
	_, err = f.c.ForkBranch(ctx, &historyv1.ForkBranchRequest{BranchId: b, NewBranchId: nb.GetId()})
	wantStatus(t, err, codes.AlreadyExists, historyv1.ErrorReason_ERROR_REASON_BRANCH_ALREADY_EXISTS)
}

// TestHistoryWritesRenderOnlyWhenAsked: the responses of SetSystem, AddMessage and
// CreateActionResponse carry `rendered` only when the request sets include_rendered (rendering
// costs more than the write); the stored message is the same either way and reads render it.
func TestHistoryWritesRenderOnlyWhenAsked(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, nil)
	for _, render := range []bool{false, true} {
		ss, err := f.c.SetSystem(ctx, &historyv1.SetSystemRequest{BranchId: b, IncludeRendered: render, System: &historyv1.Message{
			Content: &historyv1.Message_System{System: &historyv1.SystemContent{SystemMessage: strPtr("S")}}}})
		if err != nil {
			t.Fatal(err)
		}
		call := f.add(t, &historyv1.AddMessageRequest{BranchId: b, IncludeRendered: render, Input: &historyv1.AddMessageRequest_ActionRequest{
			ActionRequest: &historyv1.ActionRequestInput{Function: "add", ArgumentsJson: `{"a": 1}`},
		}}).GetMessage()
		res, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: call.GetId(), OutputJson: strPtr("2"), IncludeRendered: render})
		if err != nil {
			t.Fatal(err)
		}
		for name, m := range map[string]*historyv1.Message{"system": ss.GetSystem(), "action request": call, "action response": res.GetActionResponse(), "updated request": res.GetActionRequest()} {
			if got := m.GetRendered() != nil; got != render {
				t.Errorf("include_rendered=%v: %s has rendered=%v", render, name, got)
			}
			read, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: m.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			if read.GetMessage().GetRendered().GetText() == "" {
				t.Errorf("GetMessage(%s) has no rendering", name)
			}
			read.GetMessage().Rendered = nil
			want := proto.Clone(m).(*historyv1.Message)
			want.Rendered = nil
			// The action request was rewritten by CreateActionResponse: its latest write is
			// the updated request.
			if name != "action request" && !proto.Equal(read.GetMessage(), want) {
				t.Errorf("%s as written %v, as read %v", name, want, read.GetMessage())
			}
		}
	}
}
