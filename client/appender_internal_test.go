package client

import (
	"testing"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestWithRequestID: the Appender's copy of a request is the request with the id filled in, every
// other field (the oneof input, optional fields, unknown fields) as it was, and the request itself
// unchanged.
func TestWithRequestID(t *testing.T) {
	req := &historyv1.AddMessageRequest{
		BranchId:             "b",
		ExpectedHeadSequence: proto.Uint64(7),
		IncludeRendered:      true,
		Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "hello"},
		}},
	}
	req.ProtoReflect().SetUnknown([]byte{0xf8, 0x7f, 0x01}) // field 2047, varint 1
	orig := proto.CloneOf(req)
	got := withRequestID(req, "id-1")
	want := proto.CloneOf(req)
	want.RequestId = "id-1"
	if !proto.Equal(want, got) || string(got.ProtoReflect().GetUnknown()) != string(req.ProtoReflect().GetUnknown()) {
		t.Errorf("copy %v, want %v", got, want)
	}
	if !proto.Equal(req, orig) {
		t.Errorf("the request changed: %v, want %v", req, orig)
	}
}
