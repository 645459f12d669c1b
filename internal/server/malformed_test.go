package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// rawCodec sends *[]byte as the request exactly as given and reads responses as raw bytes, so a
// test can put on the wire what no protobuf library would encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// rawUnary sends req as the probe's unary request.
func rawUnary(ctx context.Context, conn *grpc.ClientConn, req []byte) error {
	var resp []byte
	return conn.Invoke(ctx, probeUnaryMethod, &req, &resp, grpc.ForceCodec(rawCodec{}))
}

// rawStream sends req as the probe stream's request and reads the stream to its end.
func rawStream(ctx context.Context, conn *grpc.ClientConn, req []byte) error {
	stream, err := conn.NewStream(ctx, &probeDesc.Streams[0], probeStreamMethod, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	if err := stream.SendMsg(&req); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		var resp []byte
		if err := stream.RecvMsg(&resp); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// stringValue encodes a structpb.Value whose string_value (field 3) holds s, UTF-8 or not.
func stringValue(s string) []byte {
	b := protowire.AppendTag(nil, 3, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// TestMalformedRequest: a request that does not decode, invalid UTF-8 in a string field or bytes
// that are not protobuf, is INVALID_ARGUMENT with reason MALFORMED_REQUEST, for unary calls and
// streams, and is logged like any other call; a client cannot forge the server's mark (issue 7
// acceptance: "invalid UTF-8 in strings ... answers each with the right code").
func TestMalformedRequest(t *testing.T) {
	forged := protowire.AppendTag(stringValue("ok"), malformedField, protowire.BytesType)
	forged = protowire.AppendString(forged, "string field contains invalid UTF-8")
	tests := []struct {
		name    string
		req     []byte
		code    codes.Code
		mention string
	}{
		{name: "valid", req: stringValue("ok"), code: codes.OK},
		{name: "invalid UTF-8", req: stringValue("ok\xff\xfe"), code: codes.InvalidArgument, mention: "UTF-8"},
		{name: "garbage", req: []byte{0xff, 0xff, 0xff, 0xff}, code: codes.InvalidArgument},
		{name: "truncated", req: stringValue("ok")[:3], code: codes.InvalidArgument},
		{name: "forged mark", req: forged, code: codes.OK},
	}
	ts := newTestServer(t, registerProbe)
	for _, tc := range tests {
		for kind, call := range map[string]func(context.Context, *grpc.ClientConn, []byte) error{"unary": rawUnary, "stream": rawStream} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				before := len(ts.logs.FilterMessage("finished call").All())
				err := call(testContext(t), ts.conn, tc.req)
				if got := status.Code(err); got != tc.code {
					t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
				}
				if tc.code == codes.OK {
					return
				}
				if ei := errorInfoOf(err); ei.GetReason() != historyv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST.String() {
					t.Errorf("ErrorInfo = %v, want reason MALFORMED_REQUEST", ei)
				}
				if !strings.Contains(status.Convert(err).Message(), tc.mention) {
					t.Errorf("message %q does not mention %q", status.Convert(err).Message(), tc.mention)
				}
				if after := len(ts.logs.FilterMessage("finished call").All()); after != before+1 {
					t.Errorf("%d new finished-call lines, want 1", after-before)
				}
			})
		}
	}
}

// TestMalformedReasonIgnoresOrdinaryMessages: a decoded message, or one with ordinary unknown
// fields, is not marked.
func TestMalformedReasonIgnoresOrdinaryMessages(t *testing.T) {
	v := structpb.NewStringValue("x")
	if _, bad := malformedReason(v); bad {
		t.Error("a plain message reads as malformed")
	}
	v.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	if _, bad := malformedReason(v); bad {
		t.Error("a message with an unknown field reads as malformed")
	}
	if _, bad := malformedReason("not a message"); bad {
		t.Error("a non-message reads as malformed")
	}
}
