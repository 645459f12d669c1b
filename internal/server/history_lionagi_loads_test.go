package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

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

// importOne imports a LionAGI history of one message of class lionClass holding content, and
// returns the new branch and the message id.
func importOne(t *testing.T, f *historyFixture, lionClass, role, content string) (branch, id string, err error) {
	t.Helper()
	id = "00000000-0000-4000-8000-0000000000a1"
	data := `[{"id": "` + id + `", "created_at": 1700000000.5, "metadata": {"lion_class": "lionagi.protocols.messages.` + lionClass +
		`"}, "content": ` + content + `, "embedding": null, "sender": null, "recipient": null, "channel": null, "role": "` + role + `"}]`
	imp, err := f.c.ImportBranch(testContext(t), &historyv1.ImportBranchRequest{Data: data, NewBranchId: true})
	if err != nil {
		return "", id, err
	}
	return imp.GetBranch().GetId(), id, nil
}

// exportedContent is the content of the only message of an exported branch.
func exportedContent(t *testing.T, f *historyFixture, branch string) string {
	t.Helper()
	exp, err := jsonv.ParseString(f.export(t, branch))
	if err != nil {
		t.Fatal(err)
	}
	coll := get(exp, "messages", "collections").Elems()
	if len(coll) != 1 {
		t.Fatalf("exported %d messages", len(coll))
	}
	return get(coll[0], "content").String()
}

// onlyChat is the ToChatMessages projection of a branch of one message: the chat message, and
// the render error ("" when it rendered).
func onlyChat(t *testing.T, f *historyFixture, branch string) (*historyv1.ChatMessage, string) {
	t.Helper()
	chat, err := f.c.ToChatMessages(testContext(t), &historyv1.ToChatMessagesRequest{BranchId: branch})
	if err != nil {
		t.Fatal(err)
	}
	if len(chat.GetMessages()) != 1 {
		t.Fatalf("%d chat messages", len(chat.GetMessages()))
	}
	return chat.GetMessages()[0], chat.GetRenderErrors()[0]
}

// TestImportAssistantResponseNull: LionAGI loads {"assistant_response": null}, its chat_msg content
// is None, and to_dict leaves the None out: content {} (lionagi/protocols/messages/message.py,
// MessageContent's ModelConfig(none_as_sentinel=True)).
func TestImportAssistantResponseNull(t *testing.T) {
	f := newHistoryFixture(t)
	b, _, err := importOne(t, f, "assistant_response.AssistantResponse", "assistant", `{"assistant_response": null}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := exportedContent(t, f, b); got != `{}` {
		t.Errorf("exported content = %s, LionAGI {}", got)
	}
	if cm, rerr := onlyChat(t, f, b); rerr != "" || cm.GetContentJson() != "null" {
		t.Errorf("chat = %v (render error %q), LionAGI {\"role\": \"assistant\", \"content\": None}", cm, rerr)
	}
}

// readBack reads a message and sends it back as a pre-built message (without its id) to the same
// branch: the wire form must carry what was stored. It returns the message read.
func readBack(t *testing.T, f *historyFixture, branch, id string) *historyv1.Message {
	t.Helper()
	got, err := f.c.GetMessage(testContext(t), &historyv1.GetMessageRequest{BranchId: branch, MessageId: id})
	if err != nil {
		t.Fatal(err)
	}
	pre := proto.Clone(got.GetMessage()).(*historyv1.Message)
	pre.Id, pre.Rendered, pre.Sequence = "", nil, 0
	resp, err := f.c.AddMessage(testContext(t), &historyv1.AddMessageRequest{BranchId: branch, Input: &historyv1.AddMessageRequest_Message{Message: pre}})
	if err != nil {
		t.Fatalf("AddMessage of the message read: %v", err)
	}
	again := proto.Clone(resp.GetMessage()).(*historyv1.Message)
	again.Id, again.CreatedAt, again.Sequence = got.GetMessage().Id, got.GetMessage().CreatedAt, got.GetMessage().Sequence
	again.Rendered = got.GetMessage().GetRendered()
	if !proto.Equal(again, got.GetMessage()) {
		t.Errorf("the message sent back is\n%v\nnot\n%v", again, got.GetMessage())
	}
	return got.GetMessage()
}

// TestImportSystemMessageNotText: SystemContent.from_dict keeps any system_message
// (lionagi/protocols/messages/system.py) and its rendering raises ("\n\n".join), so LionAGI loads
// the history and the System's chat_msg is None; historyd stores it too, and projects it as it
// projects any message that does not render (a render error, no content), rather than refuse the
// import. Recorded from LionAGI: system_message 5 exports {"system_message": 5}, null exports {}.
func TestImportSystemMessageNotText(t *testing.T) {
	for _, tc := range []struct{ in, out, wire string }{
		{`5`, `{"system_message":5}`, `5`},
		{`{"a": [1.0, null]}`, `{"system_message":{"a":[1.0,null]}}`, `{"a":[1.0,null]}`},
		{`null`, `{}`, `null`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f := newHistoryFixture(t)
			b, id, err := importOne(t, f, "system.System", "system", `{"system_message": `+tc.in+`}`)
			if err != nil {
				t.Fatalf("ImportBranch: %v", err)
			}
			if got := exportedContent(t, f, b); got != tc.out {
				t.Errorf("exported content = %s, LionAGI %s", got, tc.out)
			}
			if cm, rerr := onlyChat(t, f, b); rerr == "" || cm.GetContent() != nil {
				t.Errorf("chat = %v, render error %q; LionAGI's chat_msg is None", cm, rerr)
			}
			m := readBack(t, f, b, id)
			sc := m.GetSystem()
			if sc.SystemMessage != nil || sc.GetSystemMessageJson() != tc.wire {
				t.Errorf("wire content = %v, want system_message_json %s", sc, tc.wire)
			}
			if m.GetRendered().GetValue() != nil || m.GetRendered().GetRenderError() == "" {
				t.Errorf("rendered = %v", m.GetRendered())
			}
		})
	}
	f := newHistoryFixture(t)
	b := f.create(t, nil)
	for _, bad := range []*historyv1.SystemContent{
		{SystemMessageJson: strPtr(`"text"`)},
		{SystemMessage: strPtr("t"), SystemMessageJson: strPtr(`5`)},
	} {
		_, err := f.c.AddMessage(testContext(t), &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Message{Message: &historyv1.Message{
			Content: &historyv1.Message_System{System: bad}}}})
		wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
	}
}

// TestImportActionRequestArguments: ActionRequestContent.from_dict's argument rule
// (lionagi/protocols/messages/action_request.py: to_dict(arguments, fuzzy_parse=True), then a
// non-empty list's first item). Recorded from LionAGI: null, [] and "" load as {}, "[]" as [],
// "[null]" as None (left out of to_dict), all rendering "Function: f"; answering the request
// (create_action_response) sets action_response_id in place, so [] stays []. A non-empty list
// and text whose list starts with a scalar are refused (docs/decisions/0012).
func TestImportActionRequestArguments(t *testing.T) {
	for _, tc := range []struct{ in, out, wire string }{
		{`null`, `{"function":"f","arguments":{}}`, `{}`},
		{`[]`, `{"function":"f","arguments":{}}`, `{}`},
		{`""`, `{"function":"f","arguments":{}}`, `{}`},
		{`"[]"`, `{"function":"f","arguments":[]}`, `[]`},
		{`"[null]"`, `{"function":"f"}`, `null`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f := newHistoryFixture(t)
			b, id, err := importOne(t, f, "action_request.ActionRequest", "action", `{"function": "f", "arguments": `+tc.in+`}`)
			if err != nil {
				t.Fatalf("ImportBranch: %v", err)
			}
			if got := exportedContent(t, f, b); got != tc.out {
				t.Errorf("exported content = %s, LionAGI %s", got, tc.out)
			}
			if cm, rerr := onlyChat(t, f, b); rerr != "" || cm.GetText() != "Function: f" {
				t.Errorf("chat = %v, render error %q; LionAGI's is \"Function: f\"", cm, rerr)
			}
			got, err := f.c.GetMessage(testContext(t), &historyv1.GetMessageRequest{BranchId: b, MessageId: id})
			if err != nil {
				t.Fatal(err)
			}
			if w := got.GetMessage().GetActionRequest().GetArgumentsJson(); w != tc.wire {
				t.Errorf("arguments_json = %s, want %s", w, tc.wire)
			}
			resp, err := f.c.AddMessage(testContext(t), &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionOutput{
				ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: id, OutputJson: strPtr("1")}}})
			if err != nil {
				t.Fatal(err)
			}
			req, err := f.c.GetMessage(testContext(t), &historyv1.GetMessageRequest{BranchId: b, MessageId: id})
			if err != nil {
				t.Fatal(err)
			}
			rc := req.GetMessage().GetActionRequest()
			if rc.GetArgumentsJson() != tc.wire || rc.GetActionResponseId() != resp.GetMessage().GetId() {
				t.Errorf("answered request = %v, want arguments_json %s as before", rc, tc.wire)
			}
		})
	}
	f := newHistoryFixture(t)
	for _, args := range []string{`[{"a": 1}, {"b": 2}]`, `"[1]"`, `5`} {
		_, _, err := importOne(t, f, "action_request.ActionRequest", "action", `{"function": "f", "arguments": `+args+`}`)
		wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
	}
}

// TestActionRequestArgumentsSentBack: arguments a loaded ActionRequest holds that are not an object
// ([], null, "") are read as arguments_json "[]", "null", "\"\"", and a message read and sent back
// as it is keeps them (review F4: they became {}).
func TestActionRequestArgumentsSentBack(t *testing.T) {
	for _, args := range []string{`"[]"`, `"[null]"`, `"[\"\"]"`, `{"a": [1]}`, `null`} {
		t.Run(args, func(t *testing.T) {
			f := newHistoryFixture(t)
			b, id, err := importOne(t, f, "action_request.ActionRequest", "action", `{"function": "f", "arguments": `+args+`}`)
			if err != nil {
				t.Fatalf("ImportBranch: %v", err)
			}
			readBack(t, f, b, id)
		})
	}
}

// TestImportActionResponseUnchecked: ActionResponseContent.from_dict checks neither function nor
// arguments (lionagi/protocols/messages/action_response.py), and renders them as they are.
// Recorded from LionAGI: {"function": 5, "arguments": "s", "output": 1} exports as it came and
// renders "Function: 5\nArguments: s\nOutput: 1"; a null function is left out of to_dict and of
// the rendering. create_action_response copies the request's arguments as they are: "[]" gives
// a response with arguments [], "[null]" one without arguments.
func TestImportActionResponseUnchecked(t *testing.T) {
	for _, tc := range []struct{ in, out, chat, fn, fnJSON, args string }{
		{`{"function": 5, "arguments": "s", "output": 1}`, `{"function":5,"arguments":"s","output":1}`, "Function: 5\nArguments: s\nOutput: 1", "", "5", `"s"`},
		{`{"function": null, "arguments": [1], "output": 1}`, `{"arguments":[1],"output":1}`, "Arguments:\n- 1\nOutput: 1", "", "null", `[1]`},
		{`{"function": "f", "arguments": null}`, `{"function":"f"}`, "Function: f", "f", "", `null`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f := newHistoryFixture(t)
			b, id, err := importOne(t, f, "action_response.ActionResponse", "action", tc.in)
			if err != nil {
				t.Fatalf("ImportBranch: %v", err)
			}
			if got := exportedContent(t, f, b); got != tc.out {
				t.Errorf("exported content = %s, LionAGI %s", got, tc.out)
			}
			if cm, rerr := onlyChat(t, f, b); rerr != "" || cm.GetText() != tc.chat {
				t.Errorf("chat = %v, render error %q; LionAGI's is %q", cm, rerr, tc.chat)
			}
			ac := readBack(t, f, b, id).GetActionResponse()
			if ac.GetFunction() != tc.fn || ac.GetFunctionJson() != tc.fnJSON || (ac.FunctionJson != nil) != (tc.fnJSON != "") || ac.GetArgumentsJson() != tc.args {
				t.Errorf("wire content = %v", ac)
			}
		})
	}
	for _, tc := range []struct{ args, respOut string }{
		{`"[]"`, `{"function":"f","arguments":[],"output":1,"action_request_id":"00000000-0000-4000-8000-0000000000a1"}`},
		{`"[null]"`, `{"function":"f","output":1,"action_request_id":"00000000-0000-4000-8000-0000000000a1"}`},
	} {
		f := newHistoryFixture(t)
		b, id, err := importOne(t, f, "action_request.ActionRequest", "action", `{"function": "f", "arguments": `+tc.args+`}`)
		if err != nil {
			t.Fatal(err)
		}
		resp := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionOutput{
			ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: id, OutputJson: strPtr("1")}}})
		exp, _ := jsonv.ParseString(f.export(t, b))
		for _, m := range get(exp, "messages", "collections").Elems() {
			if get(m, "id").String() == `"`+resp.GetMessage().GetId()+`"` {
				if got := get(m, "content").String(); got != tc.respOut {
					t.Errorf("request arguments %s: response content = %s, LionAGI %s", tc.args, got, tc.respOut)
				}
			}
		}
	}
}

// TestImportInstructionPlainContentAndDetail: InstructionContent.from_dict sets any truthy
// plain_content and image_detail (lionagi/protocols/messages/instruction.py), unchecked; a
// plain_content is the rendering as it is, and the image parts carry image_detail as it is.
// Recorded from LionAGI: plain_content 5 exports as 5 and its chat content is 5; image_detail
// "weird" with an image gives the part {"type": "image_url", "image_url": {"url": ...,
// "detail": "weird"}}; image_detail 5 the same with "detail": 5. create_instruction does not
// check image_detail either (its Literal is only a hint), so AddMessage takes "weird" too.
func TestImportInstructionPlainContentAndDetail(t *testing.T) {
	const img = `"https://example.com/a.png"`
	for _, tc := range []struct{ in, out, chatJSON, chatDetail, pcJSON, detail, detailJSON string }{
		{`{"instruction": "x", "plain_content": 5}`, `{"instruction":"x","plain_content":5}`, `5`, "", `5`, "", ""},
		{`{"instruction": "x", "images": [` + img + `], "image_detail": "weird"}`, `{"instruction":"x","images":[` + img + `],"image_detail":"weird"}`, "", "weird", "", "weird", ""},
		{`{"instruction": "x", "images": [` + img + `], "image_detail": 5}`, `{"instruction":"x","images":[` + img + `],"image_detail":5}`,
			`[{"type":"text","text":"Instruction: x"},{"type":"image_url","image_url":{"url":` + img + `,"detail":5}}]`, "", "", "", `5`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f := newHistoryFixture(t)
			b, id, err := importOne(t, f, "instruction.Instruction", "user", tc.in)
			if err != nil {
				t.Fatalf("ImportBranch: %v", err)
			}
			if got := exportedContent(t, f, b); got != tc.out {
				t.Errorf("exported content = %s, LionAGI %s", got, tc.out)
			}
			cm, rerr := onlyChat(t, f, b)
			switch {
			case rerr != "":
				t.Errorf("render error %q", rerr)
			case tc.chatJSON != "" && cm.GetContentJson() != tc.chatJSON:
				t.Errorf("chat = %v, LionAGI's content %s", cm, tc.chatJSON)
			case tc.chatDetail != "" && (len(cm.GetParts().GetParts()) != 2 || cm.GetParts().GetParts()[1].GetImageUrl().GetDetail() != tc.chatDetail):
				t.Errorf("chat = %v, LionAGI's image part has detail %q", cm, tc.chatDetail)
			}
			ic := readBack(t, f, b, id).GetInstruction()
			if ic.GetPlainContentJson() != tc.pcJSON || ic.GetImageDetail() != tc.detail || ic.GetImageDetailJson() != tc.detailJSON {
				t.Errorf("wire content = %v", ic)
			}
		})
	}
	f := newHistoryFixture(t)
	b := f.create(t, nil)
	resp := f.add(t, &historyv1.AddMessageRequest{BranchId: b, IncludeRendered: true, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "x"}, Images: []string{"https://example.com/a.png"}, ImageDetail: strPtr("weird")}}})
	if p := resp.GetMessage().GetRendered().GetParts().GetParts(); len(p) != 2 || p[1].GetImageUrl().GetDetail() != "weird" {
		t.Errorf("rendered = %v", resp.GetMessage().GetRendered())
	}
}
