package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/vectors"
)

// TestConvertedMessagesFieldCount is etcd's trick: a new field in a wire
// message breaks this test until messageToProto and messageFromProto handle
// it and the count here is raised.
func TestConvertedMessagesFieldCount(t *testing.T) {
	checkFieldCounts(t, "convert_message*.go", []fieldCount{
		{&historyv1.Message{}, 16},
		{&historyv1.Embedding{}, 1},
		{&historyv1.SystemContent{}, 5},
		{&historyv1.InstructionContent{}, 12},
		{&historyv1.AssistantResponseContent{}, 2},
		{&historyv1.ActionRequestContent{}, 3},
		{&historyv1.ActionResponseContent{}, 6},
		{&historyv1.GenericContent{}, 1},
		{&historyv1.Rendered{}, 4},
		{&historyv1.ContentPart{}, 3},
		{&historyv1.ImageURL{}, 2},
		{&historyv1.ChatMessage{}, 4},
	})
}

// fieldCount is a wire message and the number of fields its converters handle.
type fieldCount struct {
	msg  proto.Message
	want int
}

// checkFieldCounts is etcd's trick: it fails for each message whose field count is not the count
// its converters (in the files named by converters) handle.
func checkFieldCounts(t *testing.T, converters string, counts []fieldCount) {
	t.Helper()
	for _, tc := range counts {
		md := tc.msg.ProtoReflect().Descriptor()
		if got := md.Fields().Len(); got != tc.want {
			t.Errorf("%s has %d fields, the converters handle %d: update %s and this test", md.FullName(), got, tc.want, converters)
		}
	}
}

// TestConvertRoundTripsEveryVectorMessage checks that envelope -> proto ->
// wire bytes -> proto -> envelope is lossless (equal LionAGI JSON, numbers
// by value) for every message the vectors hold (envelope issue, acceptance).
func TestConvertRoundTripsEveryVectorMessage(t *testing.T) {
	recs := vectors.ForTest(t)
	n := 0
	for _, r := range recs {
		for _, cand := range vectorMessages(r) {
			m, err := envelope.Decode(cand)
			if err != nil {
				continue // a record of bad input: nothing to convert
			}
			n++
			checkRoundTrip(t, r.Name, m)
		}
	}
	if n < 100 {
		t.Fatalf("only %d vector messages round-tripped; the vectors hold far more", n)
	}
	t.Logf("%d vector messages round-tripped through historyd.v1.Message", n)
}

// vectorMessages returns the message dicts a record carries: its input, a
// nested "message"/"dict", and every json/python output.
func vectorMessages(r vectors.Record) []jsonv.Value {
	var out []jsonv.Value
	var walk func(v jsonv.Value, depth int)
	walk = func(v jsonv.Value, depth int) {
		if depth > 6 {
			return
		}
		switch v.Kind() {
		case jsonv.Object:
			if v.Has("id") && v.Has("content") && (v.Has("metadata") || v.Has("node_metadata")) {
				out = append(out, v)
			}
			for _, m := range v.Members() {
				walk(m.Value, depth+1)
			}
		case jsonv.Array:
			for _, e := range v.Elems() {
				walk(e, depth+1)
			}
		}
	}
	walk(r.Input, 0)
	walk(r.Output, 0)
	return out
}

func checkRoundTrip(t *testing.T, name string, m *envelope.Message) {
	t.Helper()
	pb := messageToProto(m)
	bin, err := proto.Marshal(pb)
	if err != nil {
		t.Fatalf("%s: marshal: %v", name, err)
	}
	var back historyv1.Message
	if err := proto.Unmarshal(bin, &back); err != nil {
		t.Fatalf("%s: unmarshal: %v", name, err)
	}
	// protojson must keep "recipient": null apart from an absent field.
	js, err := protojson.Marshal(&back)
	if err != nil {
		t.Fatalf("%s: protojson: %v", name, err)
	}
	var viaJSON historyv1.Message
	if err := protojson.Unmarshal(js, &viaJSON); err != nil {
		t.Fatalf("%s: protojson unmarshal: %v", name, err)
	}
	for _, p := range []*historyv1.Message{&back, &viaJSON} {
		got, err := messageFromProto("message", p)
		if err != nil {
			t.Fatalf("%s: messageFromProto: %v\nproto: %s", name, err, js)
		}
		a, _ := m.Encode(envelope.ModeJSON, "")
		b, _ := got.Encode(envelope.ModeJSON, "")
		if !jsonv.Equal(a, b) {
			t.Fatalf("%s: round trip changed the message\n before %s\n after  %s", name, a, b)
		}
		ra, errA := m.Render()
		rb, errB := got.Render()
		if (errA == nil) != (errB == nil) || !jsonv.Equal(ra.JSON(), rb.JSON()) {
			t.Fatalf("%s: round trip changed the rendering: %s vs %s", name, ra.JSON(), rb.JSON())
		}
	}
}

func TestMessageFromProtoRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		json  string
		field string
	}{
		{"no content", `{}`, "message.content"},
		{"bad id", `{"id":"nope","generic":{}}`, "message.id"},
		{"participant number", `{"sender":5,"generic":{}}`, "message.sender"},
		{"participant object", `{"recipient":{"a":1},"generic":{}}`, "message.recipient"},
		{"content not JSON", `{"generic":{"contentJson":"{nope"}}`, "message.generic.content_json"},
		{"arguments not an object", `{"actionRequest":{"function":"f","argumentsJson":"[1]"}}`, "message.action_request.arguments_json"},
		{"context item not JSON", `{"instruction":{"promptContextJson":["1","x"]}}`, "message.instruction.prompt_context_json[1]"},
		{"response format not an object", `{"instruction":{"responseFormatJson":"\"str\""}}`, "message.instruction.response_format_json"},
		{"class mismatch", `{"metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"instruction":{}}`, "message.metadata.lion_class"},
		{"image detail text as JSON", `{"instruction":{"images":["abc"],"imageDetailJson":"\"huge\""}}`, "message.instruction.image_detail_json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pb historyv1.Message
			if err := protojson.Unmarshal([]byte(tc.json), &pb); err != nil {
				t.Fatal(err)
			}
			_, err := messageFromProto("message", &pb)
			fe, ok := err.(*FieldError)
			if !ok {
				t.Fatalf("want a *FieldError, got %T %v", err, err)
			}
			if fe.Field != tc.field {
				t.Fatalf("field = %q, want %q (%v)", fe.Field, tc.field, err)
			}
			if strings.Count(err.Error(), tc.field) != 1 {
				t.Fatalf("error names the field more than once: %v", err)
			}
		})
	}
}

var _ protoreflect.ProtoMessage = (*historyv1.Message)(nil)

// TestClassErrorsKeepTheirReasonAndField: a lion_class mismatch or an
// unknown class gets its own ErrorReason and still names the field
// (docs/design.md#wire-model: on input a lion_class must name the content's
// class, else INVALID_ARGUMENT).
func TestClassErrorsKeepTheirReasonAndField(t *testing.T) {
	for _, tc := range []struct {
		json   string
		reason historyv1.ErrorReason
	}{
		{`{"metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"instruction":{}}`, historyv1.ErrorReason_ERROR_REASON_LION_CLASS_MISMATCH},
		{`{"metadata":{"lion_class":"nope.mod.Foo"},"generic":{}}`, historyv1.ErrorReason_ERROR_REASON_LION_CLASS_MISMATCH},
	} {
		var pb historyv1.Message
		if err := protojson.Unmarshal([]byte(tc.json), &pb); err != nil {
			t.Fatal(err)
		}
		_, err := messageFromProto("message", &pb)
		checkStatus(t, toStatus(err), codes.InvalidArgument, tc.reason, map[string]string{"field": "message.metadata.lion_class"})
	}
}
