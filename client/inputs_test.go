package client_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestInputsBuildTheGeneratedRequests: each constructor builds the request the generated types
// spell out with their oneof wrappers (issue 19: "a plain instruction takes three nested
// wrappers").
func TestInputsBuildTheGeneratedRequests(t *testing.T) {
	const b = "0c0ffee0-0000-4000-8000-000000000001"
	tests := []struct {
		name string
		in   client.Input
		opts []client.AddOption
		want *historyv1.AddMessageRequest
	}{
		{"instruction", client.Instruction("hi", client.WithContext(map[string]int{"a": 1}, json.RawMessage(`[1, 2]`)), client.WithGuidance("be brief"),
			client.WithImages("low", "https://example.com/a.png"), client.WithResponseFormat(map[string]string{"answer": "int"}), client.WithTools(map[string]string{"name": "add"})),
			[]client.AddOption{client.From("alice"), client.To("assistant"), client.WithRequestID("r1"), client.IncludeRendered()},
			&historyv1.AddMessageRequest{BranchId: b, RequestId: "r1", Sender: client.Participant("alice"), Recipient: client.Participant("assistant"), IncludeRendered: true,
				Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
					InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "hi"},
					GuidanceValue:    &historyv1.InstructionInput_Guidance{Guidance: "be brief"},
					ContextJson:      []string{`{"a":1}`, `[1, 2]`},
					Images:           []string{"https://example.com/a.png"}, ImageDetail: proto.String("low"),
					ResponseFormatJson: proto.String(`{"answer":"int"}`), ToolSchemasJson: []string{`{"name":"add"}`},
				}}}},
		{"assistant text", client.AssistantText("42"), nil, &historyv1.AddMessageRequest{BranchId: b,
			Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{Response: &historyv1.AssistantResponseInput_Text{Text: "42"}}}}},
		{"omit content", client.AssistantText("42"), []client.AddOption{client.OmitContent()}, &historyv1.AddMessageRequest{BranchId: b, OmitContent: true,
			Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{Response: &historyv1.AssistantResponseInput_Text{Text: "42"}}}}},
		{"assistant raw", client.AssistantRaw(`{"choices": []}`), nil, &historyv1.AddMessageRequest{BranchId: b,
			Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{Response: &historyv1.AssistantResponseInput_RawResponseJson{RawResponseJson: `{"choices": []}`}}}}},
		{"system", client.System("S"), nil, &historyv1.AddMessageRequest{BranchId: b,
			Input: &historyv1.AddMessageRequest_System{System: &historyv1.SystemInput{SystemMessage: proto.String("S")}}}},
		{"action request", client.ActionRequest("add", map[string]int{"a": 30}), nil, &historyv1.AddMessageRequest{BranchId: b,
			Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "add", ArgumentsJson: `{"a":30}`}}}},
		{"action output", client.ActionOutput("req", 42), []client.AddOption{client.WithMetadata(map[string]any{"k": "v"})}, &historyv1.AddMessageRequest{BranchId: b,
			Metadata: mustStruct(t, map[string]any{"k": "v"}),
			Input:    &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: "req", OutputJson: proto.String("42")}}}},
		{"action error", client.ActionError("req", "boom"), nil, &historyv1.AddMessageRequest{BranchId: b,
			Input: &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: "req", Error: proto.String("boom")}}}},
	}
	for _, tc := range tests {
		got, err := tc.in.Request(b, tc.opts...)
		if err != nil || !proto.Equal(got, tc.want) {
			t.Errorf("%s: Request = %v, %v\nwant %v", tc.name, got, err, tc.want)
		}
	}
}

// TestInputErrors: a value that cannot be JSON, an invalid json.RawMessage and an empty Input are
// errors of Request, not panics or silent nulls.
func TestInputErrors(t *testing.T) {
	for name, in := range map[string]client.Input{
		"channel argument": client.ActionRequest("f", make(chan int)),
		"bad raw context":  client.Instruction("x", client.WithContext(json.RawMessage(`{`))),
		"empty":            {},
	} {
		if _, err := in.Request("b"); err == nil {
			t.Errorf("%s: Request gave no error", name)
		}
	}
	if _, err := client.AssistantText("x").Request("b", client.WithMetadata(map[string]any{"c": make(chan int)})); err == nil || !strings.Contains(err.Error(), "metadata") {
		t.Errorf("bad metadata: %v", err)
	}
}

// TestWatchFromStart: a watch opened right after CreateBranch with FromStart sees the branch's
// first event; After(n) starts after n (issue 19: "a Watch option to start from a sequence").
func TestWatchFromStart(t *testing.T) {
	c := dial(t, startServer(t))
	ctx := testContext(t)
	b := newBranch(t, c)
	if _, err := c.Add(ctx, b, client.Instruction("one")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opt       client.WatchOption
		wantFirst uint64
	}{{client.FromStart(), 1}, {client.After(1), 2}} {
		// The request's own after_sequence is overridden by the option.
		for commit, err := range c.Watch(ctx, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: proto.Uint64(2)}, tc.opt) {
			if err != nil {
				t.Fatal(err)
			}
			if got := commit.GetFirstSequence(); got != tc.wantFirst {
				t.Errorf("first commit starts at %d, want %d", got, tc.wantFirst)
			}
			break
		}
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
