package envelope_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

func parse(t testing.TB, s string) jsonv.Value {
	t.Helper()
	v, err := jsonv.ParseString(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDecodeNeverMutatesInput: ADR-0001 D2, "the caller's input
// dictionaries are not mutated".
func TestDecodeNeverMutatesInput(t *testing.T) {
	in := parse(t, `{"id":"00000000-0000-4000-8000-000000000070","created_at":1,"node_metadata":{"lion_class":"Instruction","k":[1,2.0]},"metadata":{"x":1},"content":{"instruction":"hi","context":"c","tool_schemas":{"tools":[{"a":1}]}},"role":"assistant"}`)
	before := in.String()
	m, err := envelope.Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	if in.String() != before {
		t.Fatalf("Decode changed its input:\n%s\n%s", before, in)
	}
	if _, err := m.Update(parse(t, `{"context":["d"]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Clone(); err != nil {
		t.Fatal(err)
	}
	if in.String() != before {
		t.Fatalf("Update/Clone changed the decoded input")
	}
}

// TestDecodeErrorsNameTheField: every bad input is an error value naming
// the field (the envelope issue, "Bad input"), never a panic.
func TestDecodeErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		json, field string
		sentinel    error
	}{
		{`{"id":"nope","content":null}`, "id", envelope.ErrInvalid},
		{`{"created_at":"garbage"}`, "created_at", envelope.ErrInvalid},
		{`{"created_at":[1]}`, "created_at", envelope.ErrInvalid},
		{`{"metadata":"str"}`, "metadata", envelope.ErrInvalid},
		{`{"metadata":{"lion_class":"nope.mod.Foo"}}`, "metadata.lion_class", envelope.ErrUnknownClass},
		{`{"metadata":{"lion_class":"Foo"}}`, "metadata.lion_class", envelope.ErrUnknownClass},
		{`{"metadata":{"lion_class":5}}`, "metadata.lion_class", envelope.ErrUnknownClass},
		{`{"metadata":{"lion_class":"lionagi.protocols.generic.element.Element"}}`, "metadata.lion_class", envelope.ErrUnknownClass},
		{`{"node_metadata":{"lion_class":"System"},"content":"x"}`, "content", envelope.ErrInvalid},
		{`{"metadata":{"lion_class":"ActionRequest"},"content":{"function":5}}`, "content.function", envelope.ErrInvalid},
		{`{"metadata":{"lion_class":"ActionRequest"},"content":{"function":"f","arguments":[1]}}`, "content.arguments", envelope.ErrInvalid},
		{`{"metadata":{"lion_class":"ActionRequest"},"content":{"function":"f","arguments":"nope"}}`, "content.arguments", envelope.ErrInvalid},
		{`{"metadata":{"lion_class":"Instruction"},"content":{"images":["data:text/html,x"]}}`, "", nil},
		{`{"metadata":{"lion_class":"Instruction"},"content":{"images":[5]}}`, "content.images[0]", envelope.ErrInvalid},
		{`{"metadata":{"lion_class":"Instruction"},"content":{"handle_context":"merge"}}`, "content.handle_context", envelope.ErrInvalid},
		{`{"metadata":{"lion_class":"Instruction"}}`, "content", envelope.ErrInvalid},
		{`{"sender":5}`, "sender", envelope.ErrInvalid},
		{`{"recipient":["a"]}`, "recipient", envelope.ErrInvalid},
		{`{"channel":1}`, "channel", envelope.ErrInvalid},
		{`{"embedding":"nope"}`, "embedding", envelope.ErrInvalid},
		{`{"embedding":["x"]}`, "embedding", envelope.ErrInvalid},
		{`{"bogus":1}`, "bogus", envelope.ErrInvalid},
		{`{"content":{"a":1,"metadata":{"lion_class":"x"}}}`, "content.metadata.lion_class", envelope.ErrUnknownClass},
	} {
		m, err := envelope.Decode(parse(t, tc.json))
		if tc.sentinel == nil {
			// Decodes, but cannot render: the error comes from Render.
			if err != nil {
				t.Errorf("%s: unexpected decode error %v", tc.json, err)
				continue
			}
			if _, err := m.Render(); !errors.Is(err, envelope.ErrRender) || !errors.Is(err, envelope.ErrInvalid) {
				t.Errorf("%s: render error %v must wrap ErrRender and ErrInvalid", tc.json, err)
			}
			continue
		}
		var fe *envelope.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: want a *FieldError, got %v", tc.json, err)
			continue
		}
		if fe.Field != tc.field || !errors.Is(err, tc.sentinel) {
			t.Errorf("%s: field %q (%v), want %q wrapping %v", tc.json, fe.Field, err, tc.field, tc.sentinel)
		}
	}
}

// TestNewRejectsClassMismatch: ADR-0001 D1, "Metadata class mismatch.".
func TestNewRejectsClassMismatch(t *testing.T) {
	_, err := envelope.New(envelope.KindInstruction, parse(t, `{"content":null,"metadata":{"lion_class":"lionagi.protocols.messages.system.System"}}`))
	if !errors.Is(err, envelope.ErrClassMismatch) {
		t.Fatalf("want ErrClassMismatch, got %v", err)
	}
	m, err := envelope.New(envelope.KindInstruction, parse(t, `{"content":null,"metadata":{"lion_class":"Instruction","k":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Metadata.Has("lion_class") {
		t.Fatal("lion_class must not stay in the live metadata (ADR-0001 D2)")
	}
}

// TestSystemDatetimeTrue: docs/design.md#system-datetime, system_datetime true is the current
// UTC minute as YYYY-MM-DDTHH:MM+00:00.
func TestSystemDatetimeTrue(t *testing.T) {
	m, err := envelope.New(envelope.KindSystem, parse(t, `{"content":{"system_message":"S","system_datetime":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := m.Render()
	now := time.Now().UTC()
	if !strings.HasPrefix(r.Text, "System Time: ") || !strings.HasSuffix(r.Text, "+00:00\n\nS") {
		t.Fatalf("rendered %q", r.Text)
	}
	stamp := strings.TrimSuffix(strings.TrimPrefix(r.Text, "System Time: "), "+00:00\n\nS")
	ts, err := time.Parse("2006-01-02T15:04", stamp)
	if err != nil || now.Sub(ts) > 2*time.Minute || ts.Sub(now) > time.Minute {
		t.Fatalf("stamp %q is not the current UTC minute (%v)", stamp, err)
	}
}

// TestParticipantsKeepTheirState: ADR-0006 D1's four participant states and
// the routing predicates, including the empty-string recipient historyd keeps
// direct on a round trip (the vectors' "differs" record).
func TestParticipantsKeepTheirState(t *testing.T) {
	for _, tc := range []struct {
		json      string
		broadcast bool
		out       string
	}{
		{`{}`, false, `"unset"`},
		{`{"recipient":null}`, true, `null`},
		{`{"recipient":""}`, false, `""`},
		{`{"recipient":"USER"}`, false, `"USER"`},
		{`{"recipient":"{12345678-1234-5678-1234-567812345678}"}`, false, `"12345678-1234-5678-1234-567812345678"`},
	} {
		m, err := envelope.New(envelope.KindGeneric, parse(t, tc.json))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if m.IsBroadcast() != tc.broadcast || m.IsDirect() == tc.broadcast {
				t.Fatalf("%s (round %d): broadcast=%v", tc.json, i, m.IsBroadcast())
			}
			enc, _ := m.Encode(envelope.ModeJSON, "")
			if r, _ := enc.Get("recipient"); r.String() != tc.out {
				t.Fatalf("%s: recipient written as %s, want %s", tc.json, r, tc.out)
			}
			if m, err = envelope.Decode(enc); err != nil {
				t.Fatal(err)
			}
		}
	}
}
