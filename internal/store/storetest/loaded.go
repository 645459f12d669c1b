package storetest

import (
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// testLoadedValuesKept: a message holds values LionAGI loads and its to_dict leaves out or would
// read back as something else (a null system_message or assistant_response, ActionRequest
// arguments from "[]" or "[null]", a null ActionResponse function and arguments, a plain_content
// and image_detail that are not text); every engine reads it back as it was written, the same
// stored form, the same LionAGI encoding and the same rendering or render failure (the sqlite and
// PostgreSQL engines decode the stored form on every read); so does a generic message whose content
// is such a message.
func testLoadedValuesKept(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	for _, tc := range []struct{ class, content string }{
		{"System", `{"system_message": null, "system_datetime": "t"}`},
		{"System", `{"system_message": [1.0, "a"]}`},
		{"AssistantResponse", `{"assistant_response": null}`},
		{"ActionRequest", `{"function": "f", "arguments": "[]"}`},
		{"ActionRequest", `{"function": "f", "arguments": "[null]"}`},
		{"ActionRequest", `{"function": "f", "arguments": "[\"\"]"}`},
		{"ActionResponse", `{"function": null, "arguments": null, "output": 1}`},
		{"ActionResponse", `{"function": 5, "arguments": "s"}`},
		{"Instruction", `{"plain_content": {"a": 1.50}, "images": ["https://example.com/a.png"], "image_detail": 5}`},
		// The same values in a message nested in a generic one (ADR-0001 D4), as the Exchange routes them.
		{"Message", `{"metadata": {"lion_class": "System"}, "content": {"system_message": null}}`},
		{"Message", `{"metadata": {"lion_class": "AssistantResponse"}, "content": {"assistant_response": null}}`},
		{"Message", `{"metadata": {"lion_class": "ActionRequest"}, "content": {"function": "f", "arguments": "[]"}}`},
		{"Message", `{"metadata": {"lion_class": "ActionResponse"}, "content": {"function": null, "output": 1}}`},
	} {
		m, err := envelope.Decode(mustJSON(t, `{"metadata": {"lion_class": "`+tc.class+`"}, "content": `+tc.content+`}`))
		if err != nil {
			t.Fatalf("%s %s: %v", tc.class, tc.content, err)
		}
		if _, err := st.AddMessage(ctx(t), b, store.AddInput{Message: m}, store.WriteOptions{}); err != nil {
			t.Fatalf("%s %s: AddMessage: %v", tc.class, tc.content, err)
		}
		got, err := st.GetMessage(ctx(t), b, m.ID)
		if err != nil {
			t.Fatalf("%s %s: GetMessage: %v", tc.class, tc.content, err)
		}
		wantStored, _ := m.MarshalJSON()
		gotStored, _ := got.Message.MarshalJSON()
		wantEnc, _ := m.Encode(envelope.ModeJSON, "")
		gotEnc, _ := got.Message.Encode(envelope.ModeJSON, "")
		wantR, wantErr := m.Render()
		gotR, gotErr := got.Message.Render()
		if string(gotStored) != string(wantStored) || gotEnc.String() != wantEnc.String() ||
			(gotErr == nil) != (wantErr == nil) || gotR.JSON().String() != wantR.JSON().String() {
			t.Errorf("%s %s read back as\n%s (render %s, %v)\nnot\n%s (render %s, %v)", tc.class, tc.content,
				gotStored, gotR.JSON(), gotErr, wantStored, wantR.JSON(), wantErr)
		}
	}
}
