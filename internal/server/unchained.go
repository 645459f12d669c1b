package server

import (
	"context"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// Some calls end before the interceptor chain runs: grpc-go refuses a unary request over
// --max-recv-msg-size (RESOURCE_EXHAUSTED) and a call to a method no service has (UNIMPLEMENTED)
// before any interceptor sees them, so the logging link never writes their line, and an operator
// looking for why a client failed would find nothing. unchainedLogger is a stats.Handler, which
// sees every call: it writes the one line for the calls the chain never saw, marked
// grpc.before_chain, with the fields of the chain's own line. The outermost link (inflight) marks
// the calls it sees.

// rpcTag is what the stats handler keeps of a call: its method, and whether the chain saw it.
type rpcTag struct {
	method  string
	chained atomic.Bool
}

type rpcTagKey struct{}

// markChained records that the interceptor chain runs for the call of ctx.
func markChained(ctx context.Context) {
	if t, ok := ctx.Value(rpcTagKey{}).(*rpcTag); ok {
		t.chained.Store(true)
	}
}

type unchainedLogger struct{ logger *zap.Logger }

func (u *unchainedLogger) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, rpcTagKey{}, &rpcTag{method: info.FullMethodName})
}

func (u *unchainedLogger) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || end.IsClient() {
		return
	}
	t, ok := ctx.Value(rpcTagKey{}).(*rpcTag)
	if !ok || t.chained.Load() {
		return
	}
	st := status.Convert(end.Error)
	service, method, _ := strings.Cut(strings.TrimPrefix(t.method, "/"), "/")
	fields := []zap.Field{
		zap.String("protocol", "grpc"),
		zap.String("grpc.component", "server"),
		zap.String("grpc.service", service),
		zap.String("grpc.method", method),
		zap.Bool("grpc.before_chain", true),
		zap.String("grpc.code", st.Code().String()),
		zap.Float64("grpc.time_ms", float64(end.EndTime.Sub(end.BeginTime).Microseconds())/1000),
		zap.String("request_id", requestIDFrom(ctx)),
	}
	if end.Error != nil {
		fields = append(fields, zap.String("grpc.error", st.Message()))
	}
	if ce := u.logger.Check(zapLevel(codeToLevel(st.Code())), "finished call"); ce != nil {
		ce.Write(fields...)
	}
}

func (u *unchainedLogger) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (u *unchainedLogger) HandleConn(context.Context, stats.ConnStats) {}
