package server

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestRequestID: a sane incoming x-request-id is used as is; a missing, empty, oversized,
// non-printable or repeated one is replaced by a new UUID; either way the id is echoed in the
// response header and is the request_id of the call's log line (issue 7: "honour a sane incoming
// x-request-id, else generate; echo it back"; docs/development.md#style-lifecycle: one line per RPC with request_id).
func TestRequestID(t *testing.T) {
	long := strings.Repeat("a", MaxRequestIDLength)
	tests := []struct {
		name string
		sent []string // x-request-id values sent; nil: none
		keep bool     // the id used is sent[0]
	}{
		{name: "none"},
		{name: "sane", sent: []string{"client-7f3a.42/retry_1"}, keep: true},
		{name: "uuid", sent: []string{"0b8f2f43-5d5c-4c53-9d85-4d1d3f3b8c11"}, keep: true},
		{name: "longest allowed", sent: []string{long}, keep: true},
		{name: "too long", sent: []string{long + "a"}},
		{name: "empty", sent: []string{""}},
		{name: "space", sent: []string{"two words"}},
		{name: "repeated", sent: []string{"one", "two"}},
	}
	for _, tc := range tests {
		for _, kind := range []string{"unary", "stream"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				ts := newTestServer(t, registerProbe)
				ctx := testContext(t)
				for _, v := range tc.sent {
					ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, v)
				}
				var header metadata.MD
				if kind == "unary" {
					err := ts.conn.Invoke(ctx, probeUnaryMethod, structpb.NewStringValue("ok"), new(structpb.Value), grpc.Header(&header))
					if err != nil {
						t.Fatalf("Unary: %v", err)
					}
				} else {
					stream, err := ts.conn.NewStream(ctx, &probeDesc.Streams[0], probeStreamMethod)
					if err != nil {
						t.Fatalf("NewStream: %v", err)
					}
					if err := stream.SendMsg(structpb.NewStringValue("ok")); err != nil {
						t.Fatal(err)
					}
					if err := stream.CloseSend(); err != nil {
						t.Fatal(err)
					}
					if err := stream.RecvMsg(new(structpb.Value)); err != nil {
						t.Fatal(err)
					}
					if header, err = stream.Header(); err != nil {
						t.Fatal(err)
					}
				}
				echoed := header.Get(RequestIDHeader)
				if len(echoed) != 1 {
					t.Fatalf("response header %s = %q, want one value", RequestIDHeader, echoed)
				}
				id := echoed[0]
				if tc.keep && id != tc.sent[0] {
					t.Errorf("request id = %q, want the client's %q", id, tc.sent[0])
				}
				if !tc.keep {
					if _, err := uuid.Parse(id); err != nil {
						t.Errorf("generated request id %q is not a UUID: %v", id, err)
					}
				}
				waitLogLine(t, ts)
				lines := ts.logs.FilterMessage("finished call").All()
				if len(lines) != 1 || lines[0].ContextMap()["request_id"] != id {
					t.Errorf("log lines %v, want one with request_id %q", lines, id)
				}
			})
		}
	}
}

// TestSaneRequestID: the characters grpc-go clients refuse to send (controls, non-ASCII) are
// refused by the server too, should another client send them.
func TestSaneRequestID(t *testing.T) {
	for id, want := range map[string]bool{
		"abc":                            true,
		"~!#$%&'()*+,-./:;<=>?@[]^_`{|}": true,
		"":                               false,
		"a b":                            false,
		"id\x01":                         false,
		"id\x7f":                         false,
		"idé":                            false,
		"tab\there":                      false,
		strings.Repeat("x", MaxRequestIDLength+1): false,
	} {
		if got := saneRequestID(id); got != want {
			t.Errorf("saneRequestID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestRequestIDsDiffer: two calls without an incoming id get different ids.
func TestRequestIDsDiffer(t *testing.T) {
	a, b := requestIDFrom(context.Background()), requestIDFrom(context.Background())
	if a == b {
		t.Errorf("two generated request ids are equal: %q", a)
	}
}

// waitLogLine waits until the server has written its finished-call line: for a stream, the client
// can read the last frame before the server's interceptors have returned. Shutting the server down
// waits for every handler, so the line is there afterwards.
func waitLogLine(t *testing.T, ts *testServer) {
	t.Helper()
	if err := ts.Shutdown(testContext(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestRequestIDOnRefusedCall: a call refused before its handler (a request that does not decode)
// still gets its request id back, so a client can quote it when it reports the failure. (A call the
// tap refuses from its headers, for a missing token or the in-flight budget, never reaches the chain
// and gets none: its trailers-only answer carries the status alone; ADR-0009.)
func TestRequestIDOnRefusedCall(t *testing.T) {
	ts := newTestServer(t, registerProbe)
	var header metadata.MD
	ctx := metadata.AppendToOutgoingContext(testContext(t), RequestIDHeader, "refused-1")
	req, resp := []byte{0xff, 0xff, 0xff, 0xff}, []byte(nil)
	err := ts.conn.Invoke(ctx, probeUnaryMethod, &req, &resp, grpc.ForceCodec(rawCodec{}), grpc.Header(&header))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a malformed request: %v, want INVALID_ARGUMENT", err)
	}
	if got := header.Get(RequestIDHeader); len(got) != 1 || got[0] != "refused-1" {
		t.Errorf("response header %s = %q, want [refused-1]", RequestIDHeader, got)
	}
}
