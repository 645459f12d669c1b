package server

import "context"

// A context derived inside the chain ends a handler's select on ctx.Done(), but not a Recv
// blocked in the transport (grpc-go's receive buffer waits on the stream's own context) nor a send
// blocked by flow control (its send quota too). The context the tap returns is the one grpc-go keeps
// as the stream's own, so the tap makes every stream's context cancellable (withStreamCancel), and
// code that must end a stream from outside its handler cancels that, with a cause: the revocation
// (revoke.go), which first writes the stream's status in the transport, since grpc-go answers a
// Recv or Send failed by the cancellation with CANCELED of its own. The cancellation alone frees
// nothing: the in-flight reservation is released when grpc-go ends the stream (the tap ties it to
// the context below this one). The revocation's status write is such an end, so a revoked stream's
// reservation is given back while its handler may still be returning, as a client that cancels
// its own stream already could; the handler holds what it read for no longer than that.

type streamCancelKey struct{}

// withStreamCancel returns ctx made cancellable, carrying its cancel function for streamCancelFrom.
func withStreamCancel(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	return context.WithValue(ctx, streamCancelKey{}, cancel)
}

// streamCancelFrom is the cancel function of the stream's own context, set by the tap; false for a
// call that did not pass the tap (a handler called directly in a test) and for a unary call other
// than a health call (health_limits.go makes every health call's context cancellable).
func streamCancelFrom(ctx context.Context) (context.CancelCauseFunc, bool) {
	cancel, ok := ctx.Value(streamCancelKey{}).(context.CancelCauseFunc)
	return cancel, ok
}
