package server

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestWireKeepsPresence: the wire model's presence choices survive both encodings a client may use
// (binary protobuf, and protojson as grpcurl speaks it). A participant absent, JSON null and a
// string stay three states (ADR-0006 D1: explicit null versus absent value; docs/design.md#wire-model); an absent embedding stays distinct from an empty one (ADR-0001 D4); an absent
// created_at stays distinct from 0 (ADR-0001 D1: absent means now).
func TestWireKeepsPresence(t *testing.T) {
	type state struct {
		recipient  string // "absent", "null" or "string"
		embedding  string // "absent" or "present"
		createdSet bool
	}
	stateOf := func(m *historyv1.Message) state {
		s := state{recipient: "absent", embedding: "absent", createdSet: m.CreatedAt != nil}
		if m.GetRecipient() != nil {
			if _, isNull := m.GetRecipient().GetKind().(*structpb.Value_NullValue); isNull {
				s.recipient = "null"
			} else {
				s.recipient = "string"
			}
		}
		if m.GetEmbedding() != nil {
			s.embedding = "present"
		}
		return s
	}
	tests := []struct {
		json string
		want state
	}{
		{`{}`, state{"absent", "absent", false}},
		{`{"recipient": null}`, state{"null", "absent", false}},
		{`{"recipient": "user"}`, state{"string", "absent", false}},
		{`{"embedding": {}}`, state{"absent", "present", false}},
		{`{"embedding": {"values": [0.5]}, "createdAt": 0}`, state{"absent", "present", true}},
	}
	for _, tc := range tests {
		t.Run(tc.json, func(t *testing.T) {
			var m historyv1.Message
			if err := protojson.Unmarshal([]byte(tc.json), &m); err != nil {
				t.Fatalf("protojson.Unmarshal: %v", err)
			}
			if got := stateOf(&m); got != tc.want {
				t.Fatalf("from JSON: %+v, want %+v", got, tc.want)
			}
			bin, err := proto.Marshal(&m)
			if err != nil {
				t.Fatal(err)
			}
			var fromBin historyv1.Message
			if err := proto.Unmarshal(bin, &fromBin); err != nil {
				t.Fatal(err)
			}
			if got := stateOf(&fromBin); got != tc.want {
				t.Errorf("after binary round trip: %+v, want %+v", got, tc.want)
			}
			js, err := protojson.Marshal(&m)
			if err != nil {
				t.Fatal(err)
			}
			var fromJSON historyv1.Message
			if err := protojson.Unmarshal(js, &fromJSON); err != nil {
				t.Fatal(err)
			}
			if got := stateOf(&fromJSON); got != tc.want {
				t.Errorf("after JSON round trip (%s): %+v, want %+v", js, got, tc.want)
			}
		})
	}
}
