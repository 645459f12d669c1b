package server

import (
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestToChatMessagesFormats: CHAT_FORMAT_LIONAGI is the default and answers exactly what a request
// without format does; CHAT_FORMAT_OPENAI answers the Chat Completions messages as JSON text, with
// the message ids and render errors per projected message; an unknown format is INVALID_ARGUMENT
// (issue 19).
func TestToChatMessagesFormats(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, &historyv1.CreateBranchRequest{System: &historyv1.SystemInput{SystemMessage: strPtr("S")}})
	f.instruction(t, b, "hi")
	req := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "f", ArgumentsJson: `{"x": 1}`}}}).GetMessage()
	if _, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: req.GetId(), OutputJson: strPtr(`{"ok": true}`)}); err != nil {
		t.Fatal(err)
	}

	def, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b})
	if err != nil {
		t.Fatal(err)
	}
	lion, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Format: historyv1.ChatFormat_CHAT_FORMAT_LIONAGI})
	if err != nil || !proto.Equal(def, lion) || def.GetMessagesJson() != "" || len(def.GetMessages()) != 4 {
		t.Errorf("LIONAGI = %v, %v; want the default's answer %v, with 4 messages and no messages_json", lion, err, def)
	}

	oa, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Format: historyv1.ChatFormat_CHAT_FORMAT_OPENAI})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"system","content":"S"},{"role":"user","content":"Instruction: hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"` + req.GetId() + `","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"` + req.GetId() + `","content":"{\"ok\":true}"}]`
	if oa.GetMessagesJson() != want {
		t.Errorf("OPENAI messages_json\n got %s\nwant %s", oa.GetMessagesJson(), want)
	}
	if len(oa.GetMessages()) != 0 || len(oa.GetMessageIds()) != 4 || len(oa.GetRenderErrors()) != 4 || oa.GetHeadSequence() != def.GetHeadSequence() {
		t.Errorf("OPENAI = %v; want no messages, 4 ids and render errors, the head", oa)
	}

	_, err = f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Format: historyv1.ChatFormat(99)})
	if _, field := wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD); field != "format" {
		t.Errorf("unknown format: field %q, want format", field)
	}
}

// TestToChatMessagesOpenAIBounded: the OpenAI format renders within --max-rendered-bytes and fits
// --max-response-bytes as the LionAGI format does (issue 11's bounds, issue 19's format).
func TestToChatMessagesOpenAIBounded(t *testing.T) {
	const rendered = 16 << 10
	f := newBoundedFixture(t, 64<<10, rendered, 1<<20)
	ctx := testContext(t)
	b := f.create(t, nil)
	deep := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "deep"}, ContextJson: []string{deepContextJSON(990, 20_000)},
	}}}).GetMessage().GetId()
	_, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Format: historyv1.ChatFormat_CHAT_FORMAT_OPENAI})
	ei, _ := wantStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RENDER_TOO_LARGE)
	if ei.GetMetadata()["messageId"] != deep {
		t.Errorf("metadata %v, want the deep message", ei.GetMetadata())
	}

	b2 := f.create(t, nil)
	for range 6 { // 6 instructions of ~14 KB: each renders under the cap, together past 64 KiB
		f.instruction(t, b2, strings.Repeat("x", 14<<10))
	}
	_, err = f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b2, Format: historyv1.ChatFormat_CHAT_FORMAT_OPENAI})
	wantStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE)
}

// TestToChatMessagesOpenAIRefusesWithinBudget: the OpenAI format counts each message against the
// response budget as it projects it and refuses at the first that does not fit, as the LionAGI
// format does (issue 11: "before anything over the budget exists"), so refusing a branch far past
// the budget costs about the budget, not the whole projection. 24 messages of 256 KiB against a
// 512 KiB budget: the whole projection is over 6 MiB rendered and again marshalled; the bound
// allows 4 MiB for the budget's worth, the store's answer and the call.
func TestToChatMessagesOpenAIRefusesWithinBudget(t *testing.T) {
	f := newBoundedFixture(t, 512<<10, 1<<20, 1<<20)
	ctx := testContext(t)
	b := f.create(t, nil)
	big := strings.Repeat("x", 256<<10)
	for range 24 {
		f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{
			Instruction: &historyv1.InstructionInput{InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: big}},
		}})
	}
	hs := NewHistoryServer(f.st, zap.NewNop())
	hs.setBounds(512<<10, 1<<20, 1<<20)
	req := &historyv1.ToChatMessagesRequest{BranchId: b, Format: historyv1.ChatFormat_CHAT_FORMAT_OPENAI}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := hs.ToChatMessages(ctx, req)
	runtime.ReadMemStats(&after)
	wantStatus(t, toStatus(err), codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("refusing allocated %d bytes, want at most %d (about the budget, not the projection)", got, 4<<20)
	}
}
