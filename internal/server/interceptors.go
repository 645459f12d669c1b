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

// The interceptor chain, outermost first (docs/development.md#style-lifecycle; issue 7). Each link sees
// what the links outside it did, and the links inside it see its effect:
//
//  0. in flight (in every Server built by New): counts the handlers running, for Shutdown
//     (inflight.go).
//  1. metrics (with WithMetrics): grpc_server_* counters and histograms, so every call is counted,
//     refused ones included, with the code the client got.
//  2. request id: the call's x-request-id (a sane incoming one, else a new UUID), put in the
//     context and echoed in the response header.
//  3. logging: one line per call at its end with service, method, code, duration and request id;
//     never message bodies.
//  4. status mapping: whatever the links inside return goes through toStatus, so the logging line
//     and the metrics show the code the client got.
//  5. auth (with WithAuthTokens): a call without a valid bearer token stops here, UNAUTHENTICATED;
//     grpc.health.v1 is exempt. The tap (tap.go) refused such calls already, before their body
//     was read; this check stays for a call that passed the tap just before a reload revoked its
//     token.
//     5a. revocation (streams, with tokens or mutual TLS): registers the stream with its credentials,
//     so that a reload or a certificate's expiry that invalidates them ends it UNAUTHENTICATED,
//     TOKEN_REVOKED (revoke.go).
//  6. stream gauges (with WithMetrics, streams only): open streams and slow-consumer evictions,
//     counted on the handler's own error.
//  7. malformed request: a request that did not decode is INVALID_ARGUMENT (malformed.go).
//  8. recovery, innermost: a handler panic becomes a fixed "internal error", its stack logged
//     with the request id.
//
// chainOrder names the links in that order; TestChainOrder checks it against interceptorChain.
var chainOrder = []string{"in flight", "metrics", "request id", "logging", "status", "auth", "revocation", "stream gauges", "malformed", "recovery"}

// link is one named place of the chain; a link that the configuration turns off is nil.
type link struct {
	name   string
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

// chainLinks returns the links of the chain, outermost first, with the ones that o turns off left
// out.
func chainLinks(logger *zap.Logger, o options) []link {
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall), // one line per RPC, at its end
		logging.WithLevels(codeToLevel),
		logging.WithErrorFields(internalCause),
		logging.WithFieldsFromContext(func(ctx context.Context) logging.Fields {
			return logging.Fields{"request_id", RequestID(ctx)}
		}),
	}
	recoverOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(recoverPanic(logger))}
	l := zapLogger(logger)
	var links []link
	if o.inflight != nil {
		links = append(links, link{"in flight", o.inflight.unary, o.inflight.stream})
	}
	if o.metrics != nil {
		links = append(links, link{"metrics", o.metrics.unaryInterceptor(), o.metrics.streamInterceptor()})
	}
	links = append(links,
		link{"request id", unaryRequestID, streamRequestID},
		link{"logging", logging.UnaryServerInterceptor(l, logOpts...), logging.StreamServerInterceptor(l, logOpts...)},
		link{"status", unaryStatus, streamStatus},
	)
	if o.tokens != nil {
		links = append(links, link{"auth", unaryAuth(o.tokens), streamAuth(o.tokens)})
	}
	if o.streams != nil && o.streams.enabled() {
		links = append(links, link{"revocation", nil, o.streams.interceptor})
	}
	if o.metrics != nil {
		links = append(links, link{"stream gauges", nil, o.metrics.streamGauges()})
	}
	links = append(links,
		link{"malformed", unaryMalformed, streamMalformed},
		// innermost: catches handler panics only
		link{"recovery", recovery.UnaryServerInterceptor(recoverOpts...), recovery.StreamServerInterceptor(recoverOpts...)},
	)
	return links
}

// interceptorChain returns the production interceptors of chainLinks, outermost first.
func interceptorChain(logger *zap.Logger, o options) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	for _, lk := range chainLinks(logger, o) {
		if lk.unary != nil {
			unary = append(unary, lk.unary)
		}
		if lk.stream != nil {
			stream = append(stream, lk.stream)
		}
	}
	return unary, stream
}

// codeToLevel is the level of the per-RPC log line. Context cancellation and deadlines are the
// client's doing and are not logged as errors (docs/development.md#style-errors).
func codeToLevel(code codes.Code) logging.Level {
	switch code {
	case codes.Canceled, codes.DeadlineExceeded:
		return logging.LevelInfo
	default:
		return logging.DefaultServerCodeToLevel(code)
	}
}

// internalCause adds the real error behind a status with a fixed message (INTERNAL, or a redacted
// domain error) to the RPC's log line; the client never sees it (docs/design.md#errors).
func internalCause(err error) logging.Fields {
	if ie, ok := errors.AsType[*redactedError](err); ok {
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
			zap.String("request_id", RequestID(ctx)),
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
