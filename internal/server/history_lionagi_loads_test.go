package server

import (
	"testing"

	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Differences a differential run against LionAGI 0.27.0 (commit 669ea9b5) found beyond issue 13:
// inputs LionAGI takes that historyd refused or changed. The expected values were recorded from
// LionAGI itself (PYTHONHASHSEED=0, Python 3.11.7).

// rawResponse is an AddMessage of raw_response_json text.
func rawResponse(branch, raw string) *historyv1.AddMessageRequest {
	return &historyv1.AddMessageRequest{BranchId: branch, Input: &historyv1.AddMessageRequest_AssistantResponse{
		AssistantResponse: &historyv1.AssistantResponseInput{Response: &historyv1.AssistantResponseInput_RawResponseJson{RawResponseJson: raw}}}}
}

// TestRawResponsePresenceIsEnough: a raw provider response is AssistantResponse.from_response
// (lionagi/protocols/messages/assistant_response.py, parse_assistant_response), which takes any
// value: `[]`, `{}`, `""`, `null`, `0` and `false` give the empty text and keep the value as
// metadata.model_response, like `{"choices": []}` always did. Recorded from LionAGI:
// from_response([]) then add_message(assistant_response=...) is content {"assistant_response": ""},
// metadata {"model_response": []}, recipient "user", chat {"role": "assistant", "content": ""}.
// The field's presence is what counts: an empty raw_response_json is no JSON text, and neither
// response field set is no response; both are INVALID_ARGUMENT, as is empty text (docs/decisions/0012 row 11).
func TestRawResponsePresenceIsEnough(t *testing.T) {
	f := newHistoryFixture(t)
	b := f.create(t, nil)
	for _, raw := range []string{`[]`, `{}`, `""`, `null`, `0`, `false`, `{"choices": []}`} {
		t.Run(raw, func(t *testing.T) {
			resp, err := f.c.AddMessage(testContext(t), rawResponse(b, raw))
			if err != nil {
				t.Fatalf("AddMessage(raw_response_json %s): %v", raw, err)
			}
			m, err := messageFromProto("message", resp.GetMessage())
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Content.Dict().String(); got != `{"assistant_response":""}` {
				t.Errorf("content = %s", got)
			}
			want, _ := jsonv.ParseString(raw)
			if got, ok := m.Metadata.Get("model_response"); !ok || !jsonv.Equal(got, want) {
				t.Errorf("metadata.model_response = %s (present %v), want %s", got, ok, want)
			}
			if got := m.Recipient.JSON().String(); got != `"user"` {
				t.Errorf("recipient = %s", got)
			}
			if r, err := m.Render(); err != nil || r.JSON().String() != `""` {
				t.Errorf("rendered = %v, %v", r.JSON(), err)
			}
		})
	}
	for name, req := range map[string]*historyv1.AddMessageRequest{
		"empty raw_response_json": rawResponse(b, ""),
		"empty text": {BranchId: b, Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
			Response: &historyv1.AssistantResponseInput_Text{Text: ""}}}},
		"no response": {BranchId: b, Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.c.AddMessage(testContext(t), req)
			wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
		})
	}
}
