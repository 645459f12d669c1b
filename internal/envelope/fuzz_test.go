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
}

// FuzzDecodeRoundTrip: for any input that decodes, decode(encode(x)) == x
// in every mode (the envelope issue's fuzz target), and nothing panics.
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
		for _, mode := range []envelope.Mode{envelope.ModePython, envelope.ModeJSON, envelope.ModeDB} {
			enc, err := m.Encode(mode, "")
			if err != nil {
				t.Fatal(err)
			}
			back, err := envelope.DecodeJSON(jsonv.Marshal(enc))
			if err != nil {
				t.Fatalf("re-decoding %s mode failed: %v\n%s", mode, err, enc)
			}
			got, _ := back.Encode(envelope.ModeJSON, "")
			if !jsonv.Equal(want, got) || back.Kind() != m.Kind() {
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
