package server

import (
	"context"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// RequestIDHeader is the metadata key of a call's request id: a client may send one to correlate
// its own logs with the server's, and the server echoes the id it used in the response header.
const RequestIDHeader = "x-request-id"

// MaxRequestIDLength bounds an incoming request id. 128 bytes holds any UUID, ULID or trace id
// with room to spare, and keeps a hostile client from making every log line carry kilobytes.
const MaxRequestIDLength = 128

type requestIDKey struct{}

// RequestID returns the request id of the call that ctx belongs to, or "" outside a call.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestIDFrom returns the incoming x-request-id when it is sane (one value, 1 to
// MaxRequestIDLength bytes of printable ASCII without spaces), else a new random UUID. A value that
// is not sane is replaced, never trimmed or escaped: it would otherwise reach the logs.
func requestIDFrom(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if vals := md.Get(RequestIDHeader); len(vals) == 1 && saneRequestID(vals[0]) {
		return vals[0]
	}
	return uuid.NewString()
}

// saneRequestID reports whether id may be used as a request id as given.
func saneRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// unaryRequestID is the outermost interceptor of the chain: it gives the call its request id (see
// requestIDFrom), puts it in the context for the interceptors and the handler, and echoes it in the
// response header.
func unaryRequestID(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id := requestIDFrom(ctx)
	// SetHeader fails only when the header was already sent, which cannot have happened yet.
	_ = grpc.SetHeader(ctx, metadata.Pairs(RequestIDHeader, id))
	return handler(context.WithValue(ctx, requestIDKey{}, id), req)
}

// streamRequestID is unaryRequestID for streams.
func streamRequestID(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	id := requestIDFrom(ctx)
	_ = ss.SetHeader(metadata.Pairs(RequestIDHeader, id))
	return handler(srv, &contextStream{ServerStream: ss, ctx: context.WithValue(ctx, requestIDKey{}, id)})
}

// contextStream is a grpc.ServerStream whose Context is replaced, so that a stream interceptor can
// hand values (the request id, the caller's identity) to the interceptors and the handler inside
// it.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the replaced context.
func (s *contextStream) Context() context.Context { return s.ctx }
