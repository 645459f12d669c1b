package envelope

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

func openAITestMessage(id string, c Content) *Message {
	return &Message{Element: Element{ID: uuid.MustParse(id), Metadata: jsonv.ObjectValue()}, Content: c}
}

func strPtr(s string) *string { return &s }

// checkOpenAISchema checks each message against the Chat Completions API's published schema for
// request messages (ChatCompletionRequestMessage: the system, user, assistant and tool variants),
// independently of the projection's code: the fixtures below are hand-written, and this says that
// they, and what the projection returns, are messages the API takes.
func checkOpenAISchema(t *testing.T, messages []map[string]any) {
	t.Helper()
	answered := map[string]bool{}
	for i, m := range messages {
		content, hasContent := m["content"]
		switch m["role"] {
		case "system":
			if _, ok := content.(string); !ok {
				t.Errorf("message %d: system content %v, want a string", i, content)
			}
		case "user":
			switch c := content.(type) {
			case string:
			case []any:
				for _, p := range c {
					part, _ := p.(map[string]any)
					switch part["type"] {
					case "text":
						if _, ok := part["text"].(string); !ok {
							t.Errorf("message %d: text part %v", i, part)
						}
					case "image_url":
						img, _ := part["image_url"].(map[string]any)
						if _, ok := img["url"].(string); !ok {
							t.Errorf("message %d: image part %v, want image_url.url", i, part)
						}
						if d, ok := img["detail"]; ok && d != "auto" && d != "low" && d != "high" {
							t.Errorf("message %d: image detail %v, want auto, low or high", i, d)
						}
					default:
						t.Errorf("message %d: part type %v", i, part["type"])
					}
				}
			default:
				t.Errorf("message %d: user content %v, want a string or parts", i, content)
			}
		case "assistant":
			calls, hasCalls := m["tool_calls"].([]any)
			if _, isText := content.(string); !isText && !(hasContent && content == nil && hasCalls) {
				t.Errorf("message %d: assistant content %v, want text, or null with tool_calls", i, content)
			}
			for _, c := range calls {
				call, _ := c.(map[string]any)
				fn, _ := call["function"].(map[string]any)
				id, _ := call["id"].(string)
				args, _ := fn["arguments"].(string)
				if id == "" || call["type"] != "function" || fn["name"] == nil || !json.Valid([]byte(args)) {
					t.Errorf("message %d: tool call %v, want id, type function, function {name, arguments as JSON text}", i, call)
				}
				answered[id] = false
			}
		case "tool":
			id, _ := m["tool_call_id"].(string)
			if _, ok := content.(string); !ok || id == "" {
				t.Errorf("message %d: tool message %v, want tool_call_id and string content", i, m)
			}
			if done, ok := answered[id]; !ok || done {
				t.Errorf("message %d: tool_call_id %q answers no earlier open tool call", i, id)
			}
			answered[id] = true
		default:
			t.Errorf("message %d: role %v", i, m["role"])
		}
	}
}

func decodeMessages(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("not a JSON array of objects: %v\n%s", err, data)
	}
	return out
}

// TestOpenAIMessages: the CHAT_FORMAT_OPENAI rules of issue 19, one message kind at a time, against
// hand-written fixtures in the API's shape.
func TestOpenAIMessages(t *testing.T) {
	const (
		sysID  = "00000000-0000-4000-8000-000000000001"
		insID  = "00000000-0000-4000-8000-000000000002"
		req1ID = "00000000-0000-4000-8000-000000000003"
		req2ID = "00000000-0000-4000-8000-000000000004"
		res1ID = "00000000-0000-4000-8000-000000000005"
		res2ID = "00000000-0000-4000-8000-000000000006"
		ansID  = "00000000-0000-4000-8000-000000000007"
		genID  = "00000000-0000-4000-8000-000000000008"
		imgID  = "00000000-0000-4000-8000-000000000009"
		req3ID = "00000000-0000-4000-8000-00000000000a"
	)
	args := jsonv.ObjectValue(jsonv.Member{Key: "city", Value: jsonv.StringValue("Oslo")})
	msgs := []*Message{
		openAITestMessage(sysID, &SystemContent{SystemMessage: "Be brief.", SystemDatetime: jsonv.NullValue()}),
		openAITestMessage(insID, &InstructionContent{Instruction: jsonv.StringValue("Weather in Oslo and Bergen?"), Guidance: jsonv.NullValue(), ResponseFormat: jsonv.NullValue()}),
		openAITestMessage(req1ID, &ActionRequestContent{Function: "weather", Arguments: args, ActionResponseID: strPtr(res1ID)}),
		openAITestMessage(req2ID, &ActionRequestContent{Function: "weather", Arguments: jsonv.ObjectValue(jsonv.Member{Key: "city", Value: jsonv.StringValue("Bergen")}), ActionResponseID: strPtr(res2ID)}),
		openAITestMessage(res1ID, &ActionResponseContent{Function: "weather", Arguments: args, Output: jsonv.ObjectValue(jsonv.Member{Key: "temp", Value: jsonv.IntValue(3)}), ActionRequestID: strPtr(req1ID)}),
		openAITestMessage(res2ID, &ActionResponseContent{Function: "weather", Arguments: args, Output: jsonv.NullValue(), ActionRequestID: strPtr(req2ID), Error: strPtr("timeout")}),
		openAITestMessage(ansID, &AssistantResponseContent{AssistantResponse: "Oslo 3°C; Bergen unknown."}),
		openAITestMessage(genID, &GenericContent{Value: jsonv.StringValue("a note")}),
		openAITestMessage(imgID, &InstructionContent{Instruction: jsonv.StringValue("What is this?"), Guidance: jsonv.NullValue(), ResponseFormat: jsonv.NullValue(),
			Images: []string{"https://example.com/a.png"}, ImageDetail: "low"}),
		openAITestMessage(req3ID, &ActionRequestContent{Function: "lookup", Arguments: jsonv.ObjectValue()}),
	}
	// The fixture, written by hand from the API reference's request-message shapes.
	want := `[
	  {"role": "system", "content": "Be brief."},
	  {"role": "user", "content": "Instruction: Weather in Oslo and Bergen?"},
	  {"role": "assistant", "content": null, "tool_calls": [
	    {"id": "00000000-0000-4000-8000-000000000003", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
	    {"id": "00000000-0000-4000-8000-000000000004", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Bergen\"}"}}
	  ]},
	  {"role": "tool", "tool_call_id": "00000000-0000-4000-8000-000000000003", "content": "{\"temp\":3}"},
	  {"role": "tool", "tool_call_id": "00000000-0000-4000-8000-000000000004", "content": "{\"error\":\"timeout\"}"},
	  {"role": "assistant", "content": "Oslo 3°C; Bergen unknown."},
	  {"role": "user", "content": "a note"},
	  {"role": "user", "content": [
	    {"type": "text", "text": "Instruction: What is this?"},
	    {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}
	  ]},
	  {"role": "assistant", "content": null, "tool_calls": [
	    {"id": "00000000-0000-4000-8000-00000000000a", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
	  ]}
	]`
	wantMsgs := decodeMessages(t, []byte(want))
	checkOpenAISchema(t, wantMsgs)

	got, errs := OpenAIMessages(msgs, 0)
	for i, err := range errs {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	gotMsgs := decodeMessages(t, jsonv.Marshal(got))
	checkOpenAISchema(t, gotMsgs)
	if len(gotMsgs) != len(wantMsgs) {
		t.Fatalf("%d messages, want %d:\n%s", len(gotMsgs), len(wantMsgs), jsonv.Marshal(got))
	}
	for i := range wantMsgs {
		if !reflect.DeepEqual(gotMsgs[i], wantMsgs[i]) {
			g, _ := json.Marshal(gotMsgs[i])
			w, _ := json.Marshal(wantMsgs[i])
			t.Errorf("message %d:\n got %s\nwant %s", i, g, w)
		}
	}
}

// TestOpenAIMessagesRenderError: a message that cannot be rendered is left out, and its error is
// reported at its index; the others are projected.
func TestOpenAIMessagesRenderError(t *testing.T) {
	bad := openAITestMessage("00000000-0000-4000-8000-000000000001", &InstructionContent{Instruction: jsonv.StringValue("x"),
		Guidance: jsonv.NullValue(), ResponseFormat: jsonv.NullValue(), Images: []string{"ftp://example.com/a.png"}})
	ok := openAITestMessage("00000000-0000-4000-8000-000000000002", &AssistantResponseContent{AssistantResponse: "fine"})
	got, errs := OpenAIMessages([]*Message{bad, ok}, 0)
	if errs[0] == nil || errs[1] != nil {
		t.Errorf("errors %v, want one for the first message only", errs)
	}
	if s := string(jsonv.Marshal(got)); s != `[{"role":"assistant","content":"fine"}]` {
		t.Errorf("projection %s", s)
	}
}

// TestOpenAIResponseWithoutRequest: an ActionResponse that names no request is projected as a
// generic message (its rendered text as user), since a tool message needs tool_call_id.
func TestOpenAIResponseWithoutRequest(t *testing.T) {
	m := openAITestMessage("00000000-0000-4000-8000-000000000001", &ActionResponseContent{Function: "f", Arguments: jsonv.ObjectValue(), Output: jsonv.IntValue(1)})
	got, _ := OpenAIMessages([]*Message{m}, 0)
	msgs := decodeMessages(t, jsonv.Marshal(got))
	if len(msgs) != 1 || msgs[0]["role"] != "user" {
		t.Errorf("projection %v, want one user message", msgs)
	}
	checkOpenAISchema(t, msgs)
}

// TestOpenAIRenderingNotText: a rendering that is not text (a loaded plain_content or assistant
// response LionAGI keeps as a non-string value, Rendered.Value) is content as its JSON text, as
// a tool's output is, never an empty string.
func TestOpenAIRenderingNotText(t *testing.T) {
	five, obj := jsonv.IntValue(5), jsonv.ObjectValue(jsonv.Member{Key: "a", Value: jsonv.IntValue(1)})
	got, errs := OpenAIMessages([]*Message{
		openAITestMessage("00000000-0000-4000-8000-000000000001", &InstructionContent{PlainContentValue: &five}),
		openAITestMessage("00000000-0000-4000-8000-000000000002", &AssistantResponseContent{Value: &obj}),
	}, 0)
	if s := string(jsonv.Marshal(got)); s != `[{"role":"user","content":"5"},{"role":"assistant","content":"{\"a\":1}"}]` || errs[0] != nil || errs[1] != nil {
		t.Errorf("projection %s, %v", s, errs)
	}
	checkOpenAISchema(t, decodeMessages(t, jsonv.Marshal(got)))
}

// TestOpenAIImageDetailNotText: an Instruction with images whose loaded image_detail is not text
// (LionAGI keeps it, decision 0012's second run) renders its part list as a JSON value, which the
// projection gives as JSON text, as the CHAT_FORMAT_OPENAI comment says, not as image parts.
func TestOpenAIImageDetailNotText(t *testing.T) {
	five := jsonv.IntValue(5)
	got, errs := OpenAIMessages([]*Message{
		openAITestMessage("00000000-0000-4000-8000-000000000001", &InstructionContent{Instruction: jsonv.StringValue("see"), Images: []string{"https://example.com/a.png"}, ImageDetailValue: &five}),
	}, 0)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	msgs := decodeMessages(t, jsonv.Marshal(got))
	if s, ok := msgs[0]["content"].(string); !ok || !strings.Contains(s, `"detail":5`) {
		t.Errorf("content = %#v, want the part list as JSON text with its detail 5", msgs[0]["content"])
	}
	checkOpenAISchema(t, msgs)
}
