// Package client is a thin Go client of historyd: Dial returns a Client whose History and Exchange
// fields are the generated gRPC stubs (gen/historyd/v1), over one connection whose unary calls are
// retried on UNAVAILABLE and DEADLINE_EXCEEDED with a bounded, jittered backoff. A retried mutation
// keeps its request_id (the client fills one in when the caller left it empty), so the server
// applies it once (AIP-155; docs/design.md#idempotency). Methods that take domain-friendly arguments
// exist only where the wire model has a trap: participants as google.protobuf.Value (Participant,
// Broadcast), paging (Messages), error reasons (Reason, ErrorInfo), the resumable branch watch
// (Watch, with After and FromStart to choose where it starts), and the chunked export and import
// of branches larger than a response (ExportBranchAll, ExportBranchTo, ImportBranchReader), and
// acknowledged delivery as a handler loop over a leasing SubscribeInbox (HandleInbox: lease, call
// the handler, Ack or Nack, ExtendLease while it runs; issue 18). Ack, Nack and ExtendLease are
// retried too, since a repeat of one the server applied changes nothing (retry.go, settlements).
//
// For the common path, inputs.go builds AddMessage's inputs without the generated oneof wrappers:
// c.Add(ctx, branch, client.Instruction("What is 30 + 12?", client.WithContext(ctx)),
// client.From("alice")), client.AssistantText, client.AssistantRaw, client.System,
// client.ActionRequest, client.ActionOutput; Input.Request gives the plain request for the stub.
// The Example functions run as tests.
//
// The package owns the client side only. It imports the generated code, grpc and genproto, and
// must not import anything under internal/: a client must build from the .proto contract alone.
package client
