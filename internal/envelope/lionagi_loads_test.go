package envelope_test

import (
	"errors"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Contents LionAGI 0.27.0 (commit 669ea9b5) loads that historyd refused or wrote back otherwise,
// found by a differential run. Each case's out and chat were recorded from LionAGI itself
// (Branch.from_dict of a history holding the message, then to_dict(mode="json")'s content and the
// message's chat_msg content; PYTHONHASHSEED=0, Python 3.11.7).

// renderFails marks a case whose chat_msg is None in LionAGI: rendering raised.
const renderFails = "<render error>"

// loadCase is one content LionAGI loads: out is its to_dict content (compared as JSON values:
// LionAGI's key order there is a set's), chat its chat_msg content as compact JSON, or renderFails.
type loadCase struct {
	class, in, out, chat string
}

var lionClasses = map[string]string{
	"System":            "lionagi.protocols.messages.system.System",
	"Instruction":       "lionagi.protocols.messages.instruction.Instruction",
	"AssistantResponse": "lionagi.protocols.messages.assistant_response.AssistantResponse",
	"ActionRequest":     "lionagi.protocols.messages.action_request.ActionRequest",
	"ActionResponse":    "lionagi.protocols.messages.action_response.ActionResponse",
}

// decodeContent decodes a message of class holding content in.
func decodeContent(t *testing.T, class, in string) (*envelope.Message, error) {
	t.Helper()
	return envelope.Decode(parse(t, `{"id":"00000000-0000-4000-8000-000000000001","created_at":1.0,"metadata":{"lion_class":"`+
		lionClasses[class]+`"},"content":`+in+`}`))
}

// checkLoads decodes each case as an import does, and checks its to_dict content and chat_msg
// against LionAGI's; then that the form the stores keep a message in (MarshalJSON, decoded again
// on every read by the sqlite and PostgreSQL engines) gives the same message back.
func checkLoads(t *testing.T, cases []loadCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.class+" "+tc.in, func(t *testing.T) {
			m, err := decodeContent(t, tc.class, tc.in)
			if err != nil {
				t.Fatalf("LionAGI loads it; Decode: %v", err)
			}
			checkAsLionAGI(t, m, tc)
			raw, err := m.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			again, err := envelope.DecodeJSON(raw)
			if err != nil {
				t.Fatalf("the stored form %s does not decode: %v", raw, err)
			}
			checkAsLionAGI(t, again, tc)
		})
	}
}

func checkAsLionAGI(t *testing.T, m *envelope.Message, tc loadCase) {
	t.Helper()
	enc, err := m.Encode(envelope.ModeJSON, "")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := enc.Get("content")
	if want := parse(t, tc.out); !jsonv.Equal(got, want) || len(got.Members()) != len(want.Members()) {
		t.Errorf("to_dict content = %s, LionAGI %s", got, want)
	}
	chat, err := m.ChatMsg()
	switch {
	case tc.chat == renderFails:
		if err == nil || !errors.Is(err, envelope.ErrRender) {
			t.Errorf("chat = %s, %v; LionAGI's chat_msg is None (rendering raises)", chat.Content.JSON(), err)
		}
	case err != nil:
		t.Errorf("render: %v; LionAGI's chat content is %s", err, tc.chat)
	case chat.Content.JSON().String() != tc.chat:
		t.Errorf("chat content = %s, LionAGI %s", chat.Content.JSON(), tc.chat)
	}
}

// TestLoadAssistantResponseNull: AssistantResponseContent.from_dict keeps a None
// assistant_response (lionagi/protocols/messages/assistant_response.py), chat_msg carries it, and
// to_dict leaves it out (MessageContent's ModelConfig(none_as_sentinel=True)).
func TestLoadAssistantResponseNull(t *testing.T) {
	checkLoads(t, []loadCase{
		{"AssistantResponse", `{"assistant_response":null}`, `{}`, `null`},
		{"AssistantResponse", `{"assistant_response":5}`, `{"assistant_response":5}`, `5`},
		{"AssistantResponse", `{}`, `{"assistant_response":""}`, `""`},
	})
}

// TestLoadSystemMessageNotText: SystemContent.from_dict keeps any system_message
// (lionagi/protocols/messages/system.py); rendering joins it with "\n\n".join, which raises for
// a value that is not text, so chat_msg is None; to_dict leaves out a None.
func TestLoadSystemMessageNotText(t *testing.T) {
	checkLoads(t, []loadCase{
		{"System", `{"system_message":5}`, `{"system_message":5}`, renderFails},
		{"System", `{"system_message":true}`, `{"system_message":true}`, renderFails},
		{"System", `{"system_message":{"a":1}}`, `{"system_message":{"a":1}}`, renderFails},
		{"System", `{"system_message":["l"]}`, `{"system_message":["l"]}`, renderFails},
		{"System", `{"system_message":null}`, `{}`, renderFails},
		{"System", `{"system_message":1.5,"system_datetime":"t"}`, `{"system_datetime":"t","system_message":1.5}`, renderFails},
		{"System", `{"system_message":""}`, `{"system_message":""}`, `""`},
	})
}

// TestLoadActionRequestArguments: ActionRequestContent.from_dict passes arguments that are not a
// dict through to_dict(arguments, fuzzy_parse=True) and, when that gives a non-empty list, takes
// its first item (lionagi/protocols/messages/action_request.py; lionagi/ln/fuzzy/_to_dict.py):
// None is {}, an empty list is {} (its enumeration), "" is {} (to_dict's `input_ == ""`), a
// string is fuzzy JSON (a dict or list), so "[]" stays [] and "[null]" gives None, which to_dict
// then leaves out. Rendering prunes them all to "Function: f".
func TestLoadActionRequestArguments(t *testing.T) {
	checkLoads(t, []loadCase{
		{"ActionRequest", `{"function":"f","arguments":null}`, `{"function":"f","arguments":{}}`, `"Function: f"`},
		{"ActionRequest", `{"function":"f","arguments":[]}`, `{"function":"f","arguments":{}}`, `"Function: f"`},
		{"ActionRequest", `{"function":"f","arguments":""}`, `{"function":"f","arguments":{}}`, `"Function: f"`},
		{"ActionRequest", `{"function":"f","arguments":"[]"}`, `{"function":"f","arguments":[]}`, `"Function: f"`},
		{"ActionRequest", `{"function":"f","arguments":"[[]]"}`, `{"function":"f","arguments":[]}`, `"Function: f"`},
		{"ActionRequest", `{"function":"f","arguments":"[null]"}`, `{"function":"f"}`, `"Function: f"`},
		{"ActionRequest", `{"function":"f","arguments":"[\"\"]"}`, `{"function":"f","arguments":""}`, `"Function: f"`},
		{"ActionRequest", `{"function":"f","arguments":"[{\"a\": 1}, 2]"}`, `{"function":"f","arguments":{"a":1}}`, `"Function: f\nArguments:\n  a: 1"`},
		{"ActionRequest", `{"function":"f","arguments":"{'a': 1,}"}`, `{"function":"f","arguments":{"a":1}}`, `"Function: f\nArguments:\n  a: 1"`},
	})
}

// TestActionRequestArgumentsRefused: what LionAGI refuses (to_dict raises: a number, a bool, blank
// text, text that is not JSON or whose JSON is a scalar), and what historyd refuses on purpose
// (docs/decisions/0012): a non-empty list, which LionAGI turns into a dict keyed by the integers
// 0, 1, ... that it cannot write as JSON (its to_dict(mode="json") raises "Dict key must be
// str"), and text whose list starts with a number, a bool, non-empty text or a non-empty list,
// which LionAGI keeps and writes out but cannot read back ("Arguments must be a dictionary").
func TestActionRequestArgumentsRefused(t *testing.T) {
	for _, args := range []string{
		`5`, `true`, `"  "`, `"not json"`, `"5"`,
		`[{"a":1},{"b":2}]`, `[1]`, `[null]`,
		`"[1]"`, `"[\"a\"]"`, `"[[1, 2]]"`, `"[false]"`,
	} {
		_, err := decodeContent(t, "ActionRequest", `{"function":"f","arguments":`+args+`}`)
		var fe *envelope.FieldError
		if !errors.As(err, &fe) || fe.Field != "content.arguments" || !errors.Is(err, envelope.ErrInvalid) {
			t.Errorf("arguments %s: %v, want an invalid content.arguments", args, err)
		}
	}
}

// TestLoadActionResponseUnchecked: ActionResponseContent.from_dict checks nothing
// (lionagi/protocols/messages/action_response.py): function and arguments are kept as given,
// None left out by to_dict, and rendered through the minimal YAML as they are.
func TestLoadActionResponseUnchecked(t *testing.T) {
	checkLoads(t, []loadCase{
		{"ActionResponse", `{"function":"f","arguments":"s","output":1}`, `{"output":1,"function":"f","arguments":"s"}`, `"Function: f\nArguments: s\nOutput: 1"`},
		{"ActionResponse", `{"function":"f","arguments":5,"output":1}`, `{"output":1,"function":"f","arguments":5}`, `"Function: f\nArguments: 5\nOutput: 1"`},
		{"ActionResponse", `{"function":"f","arguments":[1],"output":1}`, `{"output":1,"function":"f","arguments":[1]}`, `"Function: f\nArguments:\n- 1\nOutput: 1"`},
		{"ActionResponse", `{"function":"f","arguments":null,"output":1}`, `{"output":1,"function":"f"}`, `"Function: f\nOutput: 1"`},
		{"ActionResponse", `{"function":"f","arguments":"[{\"a\": 1}]","output":1}`, `{"output":1,"function":"f","arguments":"[{\"a\": 1}]"}`, `"Function: f\nArguments: '[{\"a\": 1}]'\nOutput: 1"`},
		{"ActionResponse", `{"function":5,"arguments":{"a":1}}`, `{"function":5,"arguments":{"a":1}}`, `"Function: 5\nArguments:\n  a: 1"`},
		{"ActionResponse", `{"function":null,"arguments":{"a":1}}`, `{"arguments":{"a":1}}`, `"Arguments:\n  a: 1"`},
		{"ActionResponse", `{"function":{"k":[1]},"arguments":{}}`, `{"function":{"k":[1]},"arguments":{}}`, `"Function:\n  k:\n  - 1"`},
		{"ActionResponse", `{"action_response":{"function":5,"arguments":"x","output":null},"action_request_id":null}`, `{"function":5,"arguments":"x"}`, `"Function: 5\nArguments: x"`},
	})
}

// TestLoadInstructionPlainContentAndDetail: InstructionContent.from_dict sets plain_content and
// image_detail to any truthy value (lionagi/protocols/messages/instruction.py: `if k in data and
// data[k]: setattr(...)`), with no check; a truthy plain_content is the rendering as it is (text
// or not), and the image parts carry image_detail as it is.
func TestLoadInstructionPlainContentAndDetail(t *testing.T) {
	const img = `"https://example.com/a.png"`
	checkLoads(t, []loadCase{
		{"Instruction", `{"instruction":"x","plain_content":5}`, `{"instruction":"x","plain_content":5}`, `5`},
		{"Instruction", `{"instruction":"x","plain_content":true}`, `{"instruction":"x","plain_content":true}`, `true`},
		{"Instruction", `{"instruction":"x","plain_content":{"a":[1,"b"]}}`, `{"instruction":"x","plain_content":{"a":[1,"b"]}}`, `{"a":[1,"b"]}`},
		{"Instruction", `{"instruction":"x","plain_content":"  "}`, `{"instruction":"x","plain_content":"  "}`, `"  "`},
		{"Instruction", `{"instruction":"x","plain_content":0}`, `{"instruction":"x"}`, `"Instruction: x"`},
		{"Instruction", `{"instruction":"x","plain_content":5,"images":[` + img + `]}`, `{"image_detail":"auto","instruction":"x","plain_content":5,"images":[` + img + `]}`,
			`[{"type":"text","text":5},{"type":"image_url","image_url":{"url":` + img + `,"detail":"auto"}}]`},
		{"Instruction", `{"instruction":"x","image_detail":"weird"}`, `{"image_detail":"weird","instruction":"x"}`, `"Instruction: x"`},
		{"Instruction", `{"instruction":"x","images":[` + img + `],"image_detail":"weird"}`, `{"image_detail":"weird","instruction":"x","images":[` + img + `]}`,
			`[{"type":"text","text":"Instruction: x"},{"type":"image_url","image_url":{"url":` + img + `,"detail":"weird"}}]`},
		{"Instruction", `{"instruction":"x","images":[` + img + `],"image_detail":5}`, `{"image_detail":5,"instruction":"x","images":[` + img + `]}`,
			`[{"type":"text","text":"Instruction: x"},{"type":"image_url","image_url":{"url":` + img + `,"detail":5}}]`},
		{"Instruction", `{"instruction":"x","images":[` + img + `],"image_detail":{"d":null}}`, `{"image_detail":{"d":null},"instruction":"x","images":[` + img + `]}`,
			`[{"type":"text","text":"Instruction: x"},{"type":"image_url","image_url":{"url":` + img + `,"detail":{"d":null}}}]`},
		{"Instruction", `{"instruction":"x","image_detail":false}`, `{"instruction":"x"}`, `"Instruction: x"`},
	})
}

// TestInstructionImageNotTextRefused: docs/decisions/0012 row 17. LionAGI loads an image that is
// not text, and its rendering then raises AttributeError inside the `rendered` property, so
// Message.rendered falls back to str() of the content, a dataclass repr; historyd refuses it.
func TestInstructionImageNotTextRefused(t *testing.T) {
	for _, images := range []string{`[5]`, `5`, `[null, "https://example.com/a.png"]`} {
		_, err := decodeContent(t, "Instruction", `{"instruction":"x","images":`+images+`}`)
		var fe *envelope.FieldError
		if !errors.As(err, &fe) || fe.Field != "content.images[0]" || !errors.Is(err, envelope.ErrInvalid) {
			t.Errorf("images %s: %v, want an invalid content.images[0]", images, err)
		}
	}
}
