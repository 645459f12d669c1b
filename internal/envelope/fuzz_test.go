package envelope_test

import (
	"testing"
	"unicode/utf8"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

var fuzzSeeds = []string{
	`{"id":"00000000-0000-4000-8000-000000000001","created_at":1700000000.5,"metadata":{"lion_class":"lionagi.protocols.messages.message.Message"},"content":{"text":"Hello!","n":null,"ok":true},"embedding":null,"sender":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa","recipient":null,"channel":"ops","role":"unset"}`,
	`{"metadata":{"lion_class":"Instruction"},"content":{"instruction":"Summarize","guidance":"Be brief","context":[{"doc":"a","n":1.0},"b"],"tool_schemas":{"tools":[{"name":"t"}]},"response_format":{"summary":"str","score":0.9},"images":["iVBORw0KGgo="],"image_detail":"low"}}`,
	`{"node_metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"content":{"system_message":"S","system_datetime":"2024"},"sender":"system"}`,
	`{"metadata":{"lion_class":"ActionRequest"},"content":{"action_request":{"function":"f","arguments":"{\"x\": 1}"},"action_response_id":7}}`,
	`{"metadata":{"lion_class":"ActionResponse"},"content":{"function":"f","arguments":{},"output":[1,{"a":"b"}],"error":"boom","action_request_id":"r"}}`,
	`{"metadata":{"lion_class":"AssistantResponse","model_response":{"choices":[]}},"content":{"assistant_response":"line1\nline2"},"embedding":"[1, 2.5]"}`,
	`{"content":{"id":"00000000-0000-4000-8000-000000000099","metadata":{"lion_class":"Instruction"},"content":{"instruction":"inner"}}}`,
	// Values LionAGI keeps that its to_dict leaves out or writes as it cannot read back the same.
	`{"metadata":{"lion_class":"System"},"content":{"system_message":null,"system_datetime":"t"}}`,
	`{"metadata":{"lion_class":"AssistantResponse"},"content":{"assistant_response":null}}`,
	`{"metadata":{"lion_class":"ActionRequest"},"content":{"function":"f","arguments":"[]"}}`,
	`{"metadata":{"lion_class":"ActionRequest"},"content":{"function":"f","arguments":"{ key : 'v\\'s' , other: [1, {\"a\": 2,], "}}`,
	`{"metadata":{"lion_class":"ActionResponse"},"content":{"function":null,"arguments":"s"}}`,
	`{"metadata":{"lion_class":"Instruction"},"content":{"plain_content":{"a":1},"images":["https://example.com/a.png"],"image_detail":5}}`,
}

// FuzzDecodeRoundTrip: for any input that decodes, the stored form gives it
// back exactly (decode(MarshalJSON(x)) == x, the stores' read), every mode's
// encoding decodes again (what is accepted exports and imports again), and
// nothing panics. A mode's encoding is LionAGI's to_dict, which leaves out
// the None values LionAGI keeps (a null system_message, ...) and so is not
// always x again, as in LionAGI; read once more, it is the same as before.
func FuzzDecodeRoundTrip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := envelope.DecodeJSON([]byte(s))
		if err != nil {
			return
		}
		want, err := m.Encode(envelope.ModeJSON, "")
		if err != nil {
			t.Fatal(err)
		}
		stored, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		back, err := envelope.DecodeJSON(stored)
		if err != nil {
			t.Fatalf("re-decoding the stored form failed: %v\n%s", err, stored)
		}
		if again, _ := back.MarshalJSON(); string(again) != string(stored) || back.Kind() != m.Kind() {
			t.Fatalf("decode(MarshalJSON(x)) != x:\n%s\n%s", stored, again)
		}
		if got, _ := back.Encode(envelope.ModeJSON, ""); !jsonv.Equal(want, got) {
			t.Fatalf("the stored form encodes otherwise:\n%s\n%s", want, got)
		}
		for _, mode := range []envelope.Mode{envelope.ModePython, envelope.ModeJSON, envelope.ModeDB} {
			enc, err := m.Encode(mode, "")
			if err != nil {
				t.Fatal(err)
			}
			once, err := envelope.DecodeJSON(jsonv.Marshal(enc))
			if err != nil {
				t.Fatalf("re-decoding %s mode failed: %v\n%s", mode, err, enc)
			}
			first, _ := once.Encode(mode, "")
			twice, err := envelope.DecodeJSON(jsonv.Marshal(first))
			if err != nil {
				t.Fatalf("re-decoding %s mode twice failed: %v\n%s", mode, err, first)
			}
			second, _ := twice.Encode(mode, "")
			if !jsonv.Equal(first, second) || once.Kind() != m.Kind() {
				t.Fatalf("decode(encode(x)) is not stable in %s mode:\n%s\n%s", mode, first, second)
			}
			// Where to_dict left nothing out (the stored form is json mode's), it is x again.
			if got, _ := once.Encode(envelope.ModeJSON, ""); string(stored) == string(jsonv.Marshal(want)) && !jsonv.Equal(want, got) {
				t.Fatalf("decode(encode(x)) != x in %s mode:\n%s\n%s", mode, want, got)
			}
		}
	})
}

// FuzzParticipant: normalising is stable, a role stays a role only when
// spelled exactly, and the written form reads back to the same state.
func FuzzParticipant(f *testing.F) {
	for _, s := range []string{"", " ", "user", "USER", "unset", "12345678123456781234567812345678", "urn:uuid:{12345678-1234-5678-1234-567812345678}", "alice"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := envelope.ParseParticipant(s)
		again := envelope.ParseParticipant(p.String())
		if !again.Equal(p) {
			t.Fatalf("%q -> %q -> a different state", s, p.String())
		}
		if r, ok := p.Role(); ok && string(r) != s {
			t.Fatalf("%q became role %q", s, r)
		}
		if p.Kind() == envelope.ParticipantName && p.String() != s {
			t.Fatalf("plain string %q changed to %q", s, p.String())
		}
		if p.IsNone() {
			t.Fatalf("a string never becomes None")
		}
	})
}

// FuzzRender: rendering never panics, is deterministic, and its text is
// valid UTF-8.
func FuzzRender(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := envelope.DecodeJSON([]byte(s))
		if err != nil {
			return
		}
		r1, err1 := m.Render()
		r2, err2 := m.Render()
		if (err1 == nil) != (err2 == nil) {
			t.Fatal("rendering is not deterministic")
		}
		if err1 != nil {
			return
		}
		a, b := r1.JSON().String(), r2.JSON().String()
		if a != b {
			t.Fatalf("rendering is not deterministic:\n%s\n%s", a, b)
		}
		if !utf8.ValidString(a) {
			t.Fatalf("rendering is not valid UTF-8: %q", a)
		}
	})
}
