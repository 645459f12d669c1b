package server

import (
	"context"
	"errors"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// interceptorChain returns the production interceptors, outermost first. The order STYLE.md fixes
// is request id -> logging -> auth -> recovery; issue 7 adds request id and auth in their places.
// Between logging and recovery sits the status mapping, so that a handler that returns a raw domain
// error still sends a mapped status and the logging line shows the code the client got.
func interceptorChain(logger *zap.Logger) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall), // one line per RPC, at its end
		logging.WithLevels(codeToLevel),
		logging.WithErrorFields(internalCause),
	}
	recoverOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(recoverPanic(logger))}
	l := zapLogger(logger)
	unary := []grpc.UnaryServerInterceptor{
		logging.UnaryServerInterceptor(l, logOpts...),
		unaryStatus,
		recovery.UnaryServerInterceptor(recoverOpts...), // innermost: catches handler panics only
	}
	stream := []grpc.StreamServerInterceptor{
		logging.StreamServerInterceptor(l, logOpts...),
		streamStatus,
		recovery.StreamServerInterceptor(recoverOpts...),
	}
	return unary, stream
}

// codeToLevel is the level of the per-RPC log line. Context cancellation and deadlines are the
// client's doing and are not logged as errors (STYLE.md "Errors").
func codeToLevel(code codes.Code) logging.Level {
	switch code {
	case codes.Canceled, codes.DeadlineExceeded:
		return logging.LevelInfo
	default:
		return logging.DefaultServerCodeToLevel(code)
	}
}

// internalCause adds the real error behind a fixed INTERNAL status to the RPC's log line; the
// client never sees it (DESIGN.md "Errors").
func internalCause(err error) logging.Fields {
	if ie, ok := errors.AsType[*internalError](err); ok {
		return logging.Fields{"grpc.error_cause", ie.cause.Error()}
	}
	return nil
}

// recoverPanic returns the recovery handler: it logs the panic with its stack and returns the fixed
// INTERNAL status, never the panic value or stack (the middleware's default would send them).
func recoverPanic(logger *zap.Logger) recovery.RecoveryHandlerFuncContext {
	return func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		logger.Error("panic in RPC handler",
			zap.String("grpc.full_method", method),
			zap.Any("panic", p),
			zap.ByteString("stack", debug.Stack()))
		return internalStatus().Err()
	}
}

// unaryStatus maps whatever error a unary handler returns through toStatus.
func unaryStatus(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, toStatus(err)
}

// streamStatus maps whatever error a stream handler returns through toStatus.
func streamStatus(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return toStatus(handler(srv, ss))
}
