package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Issue 13: the differences from LionAGI 0.27 found with cases the vectors do not cover. Each test
// cites the LionAGI function (commit 669ea9b5) whose behaviour it pins.

// TestRawResponseFollowsFromResponse: issue 13 item 4. AddMessage's raw_response_json is
// AssistantResponse.from_response (lionagi/protocols/messages/assistant_response.py, 669ea9b5):
// `recipient or MessageRole.USER`, so an absent and an explicit null recipient are both "user";
// metadata.model_response is parse_assistant_response's raw value whatever it is: a JSON string
// too, and a list of several responses stays a list.
func TestRawResponseFollowsFromResponse(t *testing.T) {
	f := newHistoryFixture(t)
	b := f.create(t, nil)
	for _, tc := range []struct {
		name      string
		raw       string
		recipient *structpb.Value
		text      string
		model     string
		wantRecip string
	}{
		{"dict, no recipient", `{"choices": [{"message": {"content": "hi"}}]}`, nil, "hi", `{"choices": [{"message": {"content": "hi"}}]}`, `"user"`},
		{"dict, null recipient", `{"choices": [{"message": {"content": "hi"}}]}`, structpb.NewNullValue(), "hi", `{"choices": [{"message": {"content": "hi"}}]}`, `"user"`},
		{"dict, recipient kept", `{"result": "r"}`, structpb.NewStringValue("assistant"), "r", `{"result": "r"}`, `"assistant"`},
		{"raw string", `"a raw string"`, nil, "a raw string", `"a raw string"`, `"user"`},
		{"list of two", `[{"result": "a"}, "b"]`, nil, "ab", `[{"result": "a"}, "b"]`, `"user"`},
		{"list of one", `[{"result": "a"}]`, nil, "a", `{"result": "a"}`, `"user"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Recipient: tc.recipient, Input: &historyv1.AddMessageRequest_AssistantResponse{
				AssistantResponse: &historyv1.AssistantResponseInput{Response: &historyv1.AssistantResponseInput_RawResponseJson{RawResponseJson: tc.raw}}}})
			m, err := messageFromProto("message", resp.GetMessage())
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Recipient.JSON().String(); got != tc.wantRecip {
				t.Errorf("recipient = %s, want %s", got, tc.wantRecip)
			}
			if got, _ := m.Content.Dict().Get("assistant_response"); got.String() != jsonv.StringValue(tc.text).String() {
				t.Errorf("assistant_response = %s, want %q", got, tc.text)
			}
			want, _ := jsonv.ParseString(tc.model)
			if got, _ := m.Metadata.Get("model_response"); !jsonv.Equal(got, want) {
				t.Errorf("metadata.model_response = %s, want %s", got, want)
			}
		})
	}
}

// nested returns a JSON array nested n levels deep ([[...["x"]...]]): n opening brackets.
func nested(n int) string {
	return strings.Repeat("[", n) + `"x"` + strings.Repeat("]", n)
}

// TestExportAlwaysReimports: issue 13 item 7. What any path in accepts, export then import
// accepts again: a context item nested 994 to 1001 levels deep is accepted or refused by AddMessage
// alone; each accepted one exports in every mode and imports into a new branch, and an imported
// message is held to the same limit (its values nest at most jsonv.MaxDepth).
func TestExportAlwaysReimports(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	for n := 994; n <= 1001; n++ {
		b := f.create(t, nil)
		_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "deep"}, ContextJson: []string{nested(n)}}}})
		if n > jsonv.MaxDepth {
			wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
			continue
		}
		if err != nil {
			t.Fatalf("depth %d: AddMessage: %v", n, err)
		}
		_, err = f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
			Response: &historyv1.AssistantResponseInput_RawResponseJson{RawResponseJson: `{"result": "r", "raw": ` + nested(n-1) + `}`}}}})
		if err != nil {
			t.Fatalf("depth %d: raw response: %v", n, err)
		}
		for _, mode := range []historyv1.SerializationMode{historyv1.SerializationMode_SERIALIZATION_MODE_JSON, historyv1.SerializationMode_SERIALIZATION_MODE_PYTHON, historyv1.SerializationMode_SERIALIZATION_MODE_DB} {
			exp, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: b, Mode: mode})
			if err != nil {
				t.Fatalf("depth %d %v: ExportBranch: %v", n, mode, err)
			}
			if _, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: exp.GetData(), NewBranchId: true}); err != nil {
				t.Errorf("depth %d %v: the export does not import: %v", n, mode, err)
			}
		}
	}
	// An imported message nesting deeper than a write accepts is refused like the write.
	deep := `[{"content": {"instruction": "x", "prompt_context": [` + nested(jsonv.MaxDepth+1) + `]}, "metadata": {"lion_class": "Instruction"}}]`
	_, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: deep, NewBranchId: true})
	wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
}

// TestReplaceContextWithEmptyList: issue 13 item 5. LionAGI 0.27's add_message(instruction=ins,
// context=[], handle_context="replace") (MessageManager.create_instruction, commit 669ea9b5)
// clears the context; over the wire an empty repeated field is "not given", so
// InstructionInput.context_json_list carries presence. Images and tool schemas have the same twin;
// setting a list and its twin is INVALID_ARGUMENT.
func TestReplaceContextWithEmptyList(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, nil)
	ins := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "q"}, ContextJson: []string{`"base"`}}}}).GetMessage()
	context := func() string {
		resp, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: ins.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		m, err := messageFromProto("message", resp.GetMessage())
		if err != nil {
			t.Fatal(err)
		}
		v, _ := m.Content.Dict().Get("prompt_context")
		return v.String()
	}
	replace := func(in *historyv1.InstructionInput) error {
		in.HandleContext = historyv1.ContextMode_CONTEXT_MODE_REPLACE
		_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, TargetId: ins.GetId(), Input: &historyv1.AddMessageRequest_Instruction{Instruction: in}})
		return err
	}
	// The old form, an empty repeated field, says nothing: the context stays (as before).
	if err := replace(&historyv1.InstructionInput{ContextJson: []string{}}); err != nil {
		t.Fatal(err)
	}
	if got := context(); got != `["base"]` {
		t.Fatalf("after an absent context, prompt_context = %s, want [\"base\"]", got)
	}
	if err := replace(&historyv1.InstructionInput{ContextJsonList: &historyv1.StringList{}}); err != nil {
		t.Fatal(err)
	}
	// LionAGI (run beside historyd) gives {"instruction": "q"}: the emptied context is dropped from
	// to_dict, and the prompt is "Instruction: q".
	if got := context(); got != `null` {
		t.Errorf("after replace with a present, empty context, prompt_context = %s, want it gone", got)
	}
	if r := renderedText(t, f, b, ins.GetId()); r != "Instruction: q" {
		t.Errorf("rendered = %q, want %q", r, "Instruction: q")
	}
	for name, in := range map[string]*historyv1.InstructionInput{
		"context_json": {ContextJson: []string{`1`}, ContextJsonList: &historyv1.StringList{}},
		"images":       {Images: []string{"https://example.com/a.png"}, ImagesList: &historyv1.StringList{}},
		"tool_schemas": {ToolSchemasJson: []string{`{}`}, ToolSchemasJsonList: &historyv1.StringList{Values: []string{`{}`}}},
	} {
		err := replace(in)
		if _, field := wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD); !strings.Contains(field, "_list") {
			t.Errorf("%s and its _list twin: field %q", name, field)
		}
	}
	// The twins carry values like the repeated fields do.
	m := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "q2"}, ContextJsonList: &historyv1.StringList{Values: []string{`{"a": 1}`}},
		ImagesList: &historyv1.StringList{Values: []string{"https://example.com/a.png"}}, ToolSchemasJsonList: &historyv1.StringList{Values: []string{`{"name": "t"}`}}}}}).GetMessage()
	dm, err := messageFromProto("message", m)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"prompt_context": `[{"a":1}]`, "images": `["https://example.com/a.png"]`, "tool_schemas": `[{"name":"t"}]`} {
		if got, _ := dm.Content.Dict().Get(key); got.String() != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
	// add_message(instruction=ins2, images=[], tool_schemas=[]) in LionAGI leaves
	// {"image_detail": "auto", "instruction": "q2", "prompt_context": [...]}: both lists cleared.
	if _, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, TargetId: m.GetId(), Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		ImagesList: &historyv1.StringList{}, ToolSchemasJsonList: &historyv1.StringList{}}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: m.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if dm, err = messageFromProto("message", resp.GetMessage()); err != nil {
		t.Fatal(err)
	}
	want, _ := jsonv.ParseString(`{"image_detail": "auto", "instruction": "q2", "prompt_context": [{"a": 1}]}`)
	if got := dm.Content.Dict(); !jsonv.Equal(got, want) {
		t.Errorf("after clearing images and tool schemas: %s, want %s", got, want)
	}
}

// renderedText reads a message's rendered text over gRPC.
func renderedText(t *testing.T, f *historyFixture, branch, id string) string {
	t.Helper()
	resp, err := f.c.GetMessage(testContext(t), &historyv1.GetMessageRequest{BranchId: branch, MessageId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetMessage().GetRendered().GetText()
}

// collectionsAndOrder exports a branch and returns its collections' ids and its progression.
func collectionsAndOrder(t *testing.T, f *historyFixture, branch string) (coll, order []string, data string) {
	t.Helper()
	data = f.export(t, branch)
	v, err := jsonv.ParseString(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range get(v, "messages", "collections").Elems() {
		id, _ := get(c, "id").Str()
		coll = append(coll, id)
	}
	for _, o := range get(v, "messages", "progression", "order").Elems() {
		id, _ := o.Str()
		order = append(order, id)
	}
	return coll, order, data
}

// TestCollectionsOrderIsLionAGIDictOrder: issue 13 item 1. LionAGI 0.27's Pile keeps collections in
// the order each message was last (re)inserted (MessageManager.add_message excludes and inserts a
// present message; set_system inserts the new System and excludes the old; commit 669ea9b5), and
// its progression in conversation order; linking an ActionRequest to its response changes it in
// place and does not move it. Run beside historyd: add_message(system="a"),
// add_message(instruction="hi"), add_message(system="b") gives collections [hi, b], progression
// [b, hi]; request r, instruction x, response to r: [r, x, resp] both; re-adding r: collections
// [x, resp, r], progression [r, x, resp]. An import keeps the collections order it came with.
func TestCollectionsOrderIsLionAGIDictOrder(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	sys := func(b, text string) string {
		return f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_System{System: &historyv1.SystemInput{SystemMessage: &text}}}).GetMessage().GetId()
	}
	b := f.create(t, nil)
	sys(b, "a")
	hi := f.instruction(t, b, "hi").GetId()
	sb := sys(b, "b")
	coll, order, data := collectionsAndOrder(t, f, b)
	if !slices.Equal(coll, []string{hi, sb}) || !slices.Equal(order, []string{sb, hi}) {
		t.Errorf("system replaced: collections %v, progression %v; want [hi b], [b hi]", coll, order)
	}
	imp, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: data, NewBranchId: true})
	if err != nil {
		t.Fatal(err)
	}
	if c2, o2, _ := collectionsAndOrder(t, f, imp.GetBranch().GetId()); !slices.Equal(c2, coll) || !slices.Equal(o2, order) {
		t.Errorf("after import: collections %v, progression %v; want %v, %v", c2, o2, coll, order)
	}

	b2 := f.create(t, nil)
	r := f.add(t, &historyv1.AddMessageRequest{BranchId: b2, Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "f", ArgumentsJson: `{"a": 1}`}}}).GetMessage().GetId()
	x := f.instruction(t, b2, "x").GetId()
	resp := f.add(t, &historyv1.AddMessageRequest{BranchId: b2, Input: &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: r, OutputJson: strPtr("5")}}}).GetMessage().GetId()
	if coll, order, _ := collectionsAndOrder(t, f, b2); !slices.Equal(coll, []string{r, x, resp}) || !slices.Equal(order, []string{r, x, resp}) {
		t.Errorf("after the response (the request linked in place): collections %v, progression %v", coll, order)
	}
	f.add(t, &historyv1.AddMessageRequest{BranchId: b2, TargetId: r, Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "g", ArgumentsJson: `{}`}}})
	coll, order, data = collectionsAndOrder(t, f, b2)
	if !slices.Equal(coll, []string{x, resp, r}) || !slices.Equal(order, []string{r, x, resp}) {
		t.Errorf("after re-adding the request: collections %v, progression %v; want [x resp r], [r x resp]", coll, order)
	}
	imp, err = f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: data, NewBranchId: true})
	if err != nil {
		t.Fatal(err)
	}
	if c2, o2, _ := collectionsAndOrder(t, f, imp.GetBranch().GetId()); !slices.Equal(c2, coll) || !slices.Equal(o2, order) {
		t.Errorf("after import: collections %v, progression %v; want %v, %v", c2, o2, coll, order)
	}
}

// TestImportKeepsNonStringAssistantResponse: issue 13 item 2. LionAGI 0.27's
// add_message(assistant_response={"choices": [...]}) stores the dict itself as
// content.assistant_response (vector "create_message(assistant_response=<provider dict>) stores the
// dict unparsed"; its chat_msg content is that dict). Such a history imports as it came, exports
// unchanged, renders and projects as that value (Rendered.json, ChatMessage.content_json), and
// carries it on the wire as AssistantResponseContent.assistant_response_json; AddMessage keeps
// following ADR-0006 D2 (the text is extracted: the conformance replays check that).
func TestImportKeepsNonStringAssistantResponse(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	raw := `{"choices": [{"message": {"content": "hi"}}], "n": 30.0}`
	id := uuid.NewString()
	data := `[{"id": "` + id + `", "created_at": 1700000000.5, "metadata": {"lion_class": "lionagi.protocols.messages.assistant_response.AssistantResponse"}, "content": {"assistant_response": ` + raw + `}, "embedding": null, "sender": null, "recipient": null, "channel": null, "role": "assistant"}]`
	imp, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: data})
	if err != nil {
		t.Fatalf("ImportBranch refused a LionAGI history with a dict assistant_response: %v", err)
	}
	b := imp.GetBranch().GetId()
	got, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: id})
	if err != nil {
		t.Fatal(err)
	}
	ac := got.GetMessage().GetAssistantResponse()
	if ac.GetAssistantResponse() != "" || ac.GetAssistantResponseJson() != `{"choices":[{"message":{"content":"hi"}}],"n":30.0}` {
		t.Errorf("wire content = %v", ac)
	}
	if r := got.GetMessage().GetRendered().GetJson(); r != `{"choices":[{"message":{"content":"hi"}}],"n":30.0}` {
		t.Errorf("rendered = %v", got.GetMessage().GetRendered())
	}
	chat, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b})
	if err != nil {
		t.Fatal(err)
	}
	if len(chat.GetMessages()) != 1 || chat.GetMessages()[0].GetRole() != "assistant" || chat.GetMessages()[0].GetContentJson() != `{"choices":[{"message":{"content":"hi"}}],"n":30.0}` {
		t.Errorf("chat = %v", chat.GetMessages())
	}
	exp, _ := jsonv.ParseString(f.export(t, b))
	want, _ := jsonv.ParseString(raw)
	if v := get(get(exp, "messages", "collections").Elems()[0], "content", "assistant_response"); !jsonv.Equal(v, want) || v.String() != want.String() {
		t.Errorf("exported assistant_response = %s, want %s as it came", v, want)
	}
	// The wire form round-trips through a pre-built message; a string in the JSON twin, or both
	// fields set, is refused.
	pre := got.GetMessage()
	pre.Id = ""
	if _, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Message{Message: pre}}); err != nil {
		t.Errorf("AddMessage of the read message: %v", err)
	}
	for _, bad := range []*historyv1.AssistantResponseContent{
		{AssistantResponseJson: strPtr(`"text"`)},
		{AssistantResponse: "t", AssistantResponseJson: strPtr(`{}`)},
	} {
		_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Message{Message: &historyv1.Message{
			Content: &historyv1.Message_AssistantResponse{AssistantResponse: bad}}}})
		wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
	}
}
