package client

import "google.golang.org/protobuf/types/known/structpb"

// Participant is a sender or recipient given as text: a role name ("user", "assistant", ...), UUID
// text (an owner, a branch), or any other string, which the server normalises (ADR-0006 D1). An
// absent Value (nil) is UNSET; see Broadcast for the explicit None.
func Participant(s string) *structpb.Value { return structpb.NewStringValue(s) }

// Broadcast is the explicit None participant, JSON null: as a recipient of ExchangeService.Send it
// broadcasts to every other registered owner (ADR-0006 D5); as a sender or recipient of AddMessage
// it is LionAGI's None.
func Broadcast() *structpb.Value { return structpb.NewNullValue() }
