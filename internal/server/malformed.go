package server

import (
	"bytes"
	"context"
	"crypto/rand"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// A request that does not decode (bytes that are not protobuf, a string field holding invalid
// UTF-8) is the client's mistake and gets INVALID_ARGUMENT. grpc-go would answer INTERNAL, and for
// unary calls it decodes before any interceptor runs, so the failure would not even be logged. The
// server therefore decodes requests with requestCodec: on failure it leaves the message empty but
// marked, and the malformed-request interceptor turns the mark into INVALID_ARGUMENT (reason
// MALFORMED_REQUEST) inside the chain, where the call is logged and counted like any other.

// malformedField is the protobuf field number of the mark: the largest valid number, which no
// historyd message uses.
const malformedField protowire.Number = protowire.MaxValidNumber

// malformedNonce makes the mark unforgeable: a client cannot send an unknown field that the server
// mistakes for its own mark, because it cannot know this per-process random prefix.
var malformedNonce = func() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}()

// requestCodec is the proto codec with lenient decoding: see above. Encoding is unchanged, but for
// WatchBranch frames marshalled once for all their watchers (history_watch_frames.go).
type requestCodec struct{ encoding.CodecV2 }

// newRequestCodec wraps the registered proto codec.
func newRequestCodec() requestCodec {
	return requestCodec{encoding.GetCodecV2(grpcproto.Name)}
}

// Unmarshal decodes data into v; when that fails and v is a protobuf message, v is reset and
// marked as malformed with the decoding error, and the error is swallowed.
func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, malformedField, protowire.BytesType)
	mark = protowire.AppendBytes(mark, append(bytes.Clone(malformedNonce), err.Error()...))
	m.ProtoReflect().SetUnknown(mark)
	return nil
}

// malformedReason returns the decoding error that requestCodec recorded in m, if m is marked.
func malformedReason(m any) (string, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return "", false
	}
	unknown := pm.ProtoReflect().GetUnknown()
	num, typ, n := protowire.ConsumeTag(unknown)
	if n < 0 || num != malformedField || typ != protowire.BytesType {
		return "", false
	}
	val, n2 := protowire.ConsumeBytes(unknown[n:])
	if n2 < 0 || n+n2 != len(unknown) || !bytes.HasPrefix(val, malformedNonce) {
		return "", false
	}
	return string(val[len(malformedNonce):]), true
}

// malformedStatus is the status of a request that did not decode.
func malformedStatus(reason string) error {
	return withErrorInfo(status.New(codes.InvalidArgument, "malformed request: "+reason),
		historyv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST, nil).Err()
}

// unaryMalformed rejects a unary request that requestCodec marked.
func unaryMalformed(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if reason, bad := malformedReason(req); bad {
		return nil, malformedStatus(reason)
	}
	return handler(ctx, req)
}

// streamMalformed makes every RecvMsg of a stream reject a message that requestCodec marked.
func streamMalformed(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &malformedStream{ss})
}

type malformedStream struct{ grpc.ServerStream }

// RecvMsg receives m and fails with INVALID_ARGUMENT when it did not decode.
func (s *malformedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if reason, bad := malformedReason(m); bad {
		return malformedStatus(reason)
	}
	return nil
}
