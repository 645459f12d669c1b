package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestAddMessageOmitContent: AddMessageRequest.omit_content answers with the written message less
// its content and rendering (an acknowledgement: id, created_at, metadata, role, participants,
// sequence, with index and head_sequence), while the message is written whole; a repeated request
// id is answered as the repeat asks; with include_rendered it is INVALID_ARGUMENT, nothing written.
func TestAddMessageOmitContent(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, &historyv1.CreateBranchRequest{})
	full := f.add(t, &historyv1.AddMessageRequest{BranchId: b, RequestId: "full", Sender: sval("user"), Recipient: sval("assistant"),
		Input: instructionInput("hello")})
	ack := f.add(t, &historyv1.AddMessageRequest{BranchId: b, RequestId: "ack", Sender: sval("user"), Recipient: sval("assistant"),
		OmitContent: true, Input: instructionInput("hello again")})

	if ack.GetMessage().GetContent() != nil || ack.GetMessage().GetRendered() != nil {
		t.Fatalf("omit_content answered with content %v, rendered %v", ack.GetMessage().GetContent(), ack.GetMessage().GetRendered())
	}
	if ack.GetIndex() != full.GetIndex()+1 || ack.GetHeadSequence() != full.GetHeadSequence()+1 {
		t.Errorf("index, head = %d, %d; want %d, %d", ack.GetIndex(), ack.GetHeadSequence(), full.GetIndex()+1, full.GetHeadSequence()+1)
	}
	// The acknowledgement is the stored message, content aside.
	stored := func(id string) *historyv1.Message {
		t.Helper()
		got, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: id, OmitRendered: true})
		if err != nil {
			t.Fatal(err)
		}
		return got.GetMessage()
	}
	withoutContent := func(m *historyv1.Message) *historyv1.Message {
		m = proto.Clone(m).(*historyv1.Message)
		m.Content = nil
		return m
	}
	got := stored(ack.GetMessage().GetId())
	if got.GetInstruction().GetInstruction() != "hello again" {
		t.Fatalf("the message was not written whole: %v", got)
	}
	sameResponse(t, "the acknowledgement against the stored message without its content", withoutContent(got), ack.GetMessage())
	if ack.GetMessage().GetMetadata().GetFields()["lion_class"].GetStringValue() == "" || ack.GetMessage().GetSequence() == 0 {
		t.Errorf("the acknowledgement lacks lion_class or the sequence: %v", ack.GetMessage())
	}

	// Every field but the content stays: a pre-built message with a channel and an embedding.
	channel := "ops"
	prebuilt := f.add(t, &historyv1.AddMessageRequest{BranchId: b, OmitContent: true, Input: &historyv1.AddMessageRequest_Message{Message: &historyv1.Message{
		Channel: &channel, Embedding: &historyv1.Embedding{Values: []float64{0.5, 1}}, Sender: sval("user"),
		Content: &historyv1.Message_Instruction{Instruction: &historyv1.InstructionContent{InstructionValue: &historyv1.InstructionContent_Instruction{Instruction: "pre"}}},
	}}})
	sameResponse(t, "a pre-built message's acknowledgement against the stored message without its content", withoutContent(stored(prebuilt.GetMessage().GetId())), prebuilt.GetMessage())
	if prebuilt.GetMessage().GetChannel() != channel || len(prebuilt.GetMessage().GetEmbedding().GetValues()) != 2 {
		t.Errorf("the acknowledgement lost the channel or the embedding: %v", prebuilt.GetMessage())
	}

	// A repeat is answered as the repeat asks, both ways.
	again := f.add(t, &historyv1.AddMessageRequest{BranchId: b, RequestId: "full", OmitContent: true, Input: instructionInput("other")})
	want := proto.Clone(full).(*historyv1.AddMessageResponse)
	want.Message.Content = nil
	sameResponse(t, "a repeat with omit_content", want, again)
	whole := f.add(t, &historyv1.AddMessageRequest{BranchId: b, RequestId: "ack", Input: instructionInput("other")})
	if whole.GetMessage().GetInstruction().GetInstruction() != "hello again" {
		t.Errorf("a repeat without omit_content of an omit_content write: %v, want the whole message", whole.GetMessage())
	}

	head := f.head(t, b)
	_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, OmitContent: true, IncludeRendered: true, Input: instructionInput("x")})
	wantField(t, err, "omit_content")
	if h := f.head(t, b); h != head {
		t.Errorf("head %d after the refused write, want %d", h, head)
	}
}

// TestAddMessageOmitContentUpdatedRequest: an action output written with omit_content answers
// with the ActionRequest it updated less its content too.
func TestAddMessageOmitContentUpdatedRequest(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, &historyv1.CreateBranchRequest{})
	call := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionRequest{
		ActionRequest: &historyv1.ActionRequestInput{Function: "f", ArgumentsJson: `{"a":1}`}}})
	out := f.add(t, &historyv1.AddMessageRequest{BranchId: b, OmitContent: true, Input: &historyv1.AddMessageRequest_ActionOutput{
		ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: call.GetMessage().GetId(), OutputJson: strPtr("2")}}})
	if out.GetMessage().GetContent() != nil || out.GetUpdatedRequest() == nil || out.GetUpdatedRequest().GetContent() != nil {
		t.Fatalf("omit_content answered %v", out)
	}
	if out.GetUpdatedRequest().GetId() != call.GetMessage().GetId() {
		t.Errorf("updated_request %s, want the ActionRequest %s", out.GetUpdatedRequest().GetId(), call.GetMessage().GetId())
	}
	req, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: call.GetMessage().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if req.GetMessage().GetActionRequest().GetActionResponseId() != out.GetMessage().GetId() {
		t.Errorf("the ActionRequest's action_response_id = %q, want %q", req.GetMessage().GetActionRequest().GetActionResponseId(), out.GetMessage().GetId())
	}
}
