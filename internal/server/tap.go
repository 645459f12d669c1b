package server

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// callTap is the server's grpc.InTapHandle (issue 11, "auth before bytes"; ADR-0009). grpc-go calls
// it with a call's method and metadata as soon as its HEADERS frame arrives, before it reads or
// decodes a byte of the body; a call it refuses is answered from there (its status, ErrorInfo
// included, goes in the trailers-only response) and the body is never read: the stream is reset.
// So an unauthenticated call, or one past the in-flight budget, costs the server its headers (and,
// with a grpc-timeout, grpc-go's timer for it until that deadline, which the tap cannot stop).
//
// It runs on the connection's reader goroutine with the transport's lock held, so it must not
// block: it hashes a token, compares digests, does one atomic add, for a stream makes its context
// cancellable (stream_cancel.go) and, for a call that reserves, starts the timer that bounds how
// long it may wait for its request (recv_timeout.go). Calls it refuses never reach
// the interceptor chain or the stats handler; they are counted in
// historyd_calls_refused_before_read_total (with WithMetrics), not logged one line each, which
// would turn a flood into log volume.
type callTap struct {
	tokens  *Tokens         // nil: no authentication
	budget  *inflightBudget // --max-inflight-bytes
	health  *inflightBudget // the health calls' own pool (health_limits.go)
	metrics *Metrics        // nil: no metrics

	// bodyTimeout and idleTimeout bound how long a call that reserves may wait on its client
	// (--request-body-timeout, --stream-idle-timeout; recv_timeout.go).
	bodyTimeout, idleTimeout time.Duration

	// methods holds the kind of each registered method (the full name's); Serve sets it from the
	// registered services. Before that, and for a method no service has, a call reserves and is
	// treated as a stream.
	methods atomic.Pointer[map[string]methodKind]
}

// methodKind is what the tap needs to know of a method.
type methodKind struct {
	stream       bool // client- or server-streaming: it gets a context the server can end (stream_cancel.go)
	serverStream bool // server-streaming only: it reserves nothing (inflight_budget.go)
}

// learnMethods records the kinds of the methods of gs.
func (c *callTap) learnMethods(gs *grpc.Server) {
	m := map[string]methodKind{}
	for service, info := range gs.GetServiceInfo() {
		for _, method := range info.Methods {
			m["/"+service+"/"+method.Name] = methodKind{
				stream:       method.IsServerStream || method.IsClientStream,
				serverStream: method.IsServerStream && !method.IsClientStream,
			}
		}
	}
	c.methods.Store(&m)
}

// kind is the kind of fullMethod: a stream that reserves when it is not known.
func (c *callTap) kind(fullMethod string) methodKind {
	m := c.methods.Load()
	if m == nil {
		return methodKind{stream: true}
	}
	return (*m)[fullMethod]
}

// handle authenticates the call, then reserves its share of the in-flight budget; see callTap.
// Health calls, which need no token, have rules of their own (health_limits.go).
func (c *callTap) handle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if authExempt(info.FullMethodName) {
		return c.healthTap(ctx, info)
	}
	if c.tokens != nil {
		digest, err := bearerDigest(info.Header, c.tokens)
		if err != nil {
			c.metrics.refusedBeforeRead("unauthenticated")
			return ctx, err
		}
		ctx = withPrincipal(ctx, digest)
	}
	ctx = withBudget(ctx, c.budget) // handlers that hold more than their request reserve it from here
	kind := c.kind(info.FullMethodName)
	var r *reservation
	if !kind.serverStream {
		var err error
		if r, err = c.budget.reserve(); err != nil {
			c.metrics.refusedBeforeRead("inflight_budget")
			return ctx, err
		}
		ctx = withReservation(ctx, r)
	}
	if kind.stream {
		// Last: a cancellation through it does not release the reservation, which goes when
		// grpc-go ends the stream (a revocation's status write ends it: stream_cancel.go).
		ctx = withStreamCancel(ctx)
	}
	if !kind.serverStream {
		// Outermost, so that the transport waits on it: the reservation may wait on the client
		// for so long only (recv_timeout.go).
		idle := c.idleTimeout
		if info.FullMethodName == historyv1.HistoryService_AppendMessages_FullMethodName {
			idle = 0 // an Appender's stream waits for its next item for as long as it lives (recv_timeout.go)
		}
		ctx = withRecvWatch(ctx, c.bodyTimeout, idle)
		r.stopOnRelease(recvWatchFrom(ctx).timer) // the release runs when the call ends: no timer outlives it
	}
	return ctx, nil
}
