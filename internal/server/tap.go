package server

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

// callTap is the server's grpc.InTapHandle (issue 11, "auth before bytes"; ADR-0009). grpc-go calls
// it with a call's method and metadata as soon as its HEADERS frame arrives, before it reads or
// decodes a byte of the body; a call it refuses is answered from there (its status, ErrorInfo
// included, goes in the trailers-only response) and the body is never read: the stream is reset.
// So an unauthenticated call, or one past the in-flight budget, costs the server its headers.
//
// It runs on the connection's reader goroutine with the transport's lock held, so it must not
// block: it hashes a token, compares digests and does one atomic add. Calls it refuses never reach
// the interceptor chain or the stats handler; they are counted in
// historyd_calls_refused_before_read_total (with WithMetrics), not logged one line each, which
// would turn a flood into log volume.
type callTap struct {
	tokens  *Tokens         // nil: no authentication
	budget  *inflightBudget // --max-inflight-bytes
	health  *inflightBudget // the health checks' own pool, when budget is full
	metrics *Metrics        // nil: no metrics

	// serverStreams holds the full names of the server-streaming methods, which do not reserve
	// (inflight_budget.go); Serve sets it from the registered services. Before that, and for a
	// method no service has, a call reserves.
	serverStreams atomic.Pointer[map[string]bool]
}

// learnMethods records which methods of gs are server-streaming only.
func (c *callTap) learnMethods(gs *grpc.Server) {
	m := map[string]bool{}
	for service, info := range gs.GetServiceInfo() {
		for _, method := range info.Methods {
			if method.IsServerStream && !method.IsClientStream {
				m["/"+service+"/"+method.Name] = true
			}
		}
	}
	c.serverStreams.Store(&m)
}

// reserves reports whether a call of fullMethod reserves its share of the in-flight budget.
func (c *callTap) reserves(fullMethod string) bool {
	m := c.serverStreams.Load()
	return m == nil || !(*m)[fullMethod]
}

// handle authenticates the call, then reserves its share of the in-flight budget; see callTap.
func (c *callTap) handle(ctx context.Context, info *tap.Info) (context.Context, error) {
	exempt := authExempt(info.FullMethodName)
	if c.tokens != nil && !exempt {
		digest, err := bearerDigest(info.Header, c.tokens)
		if err != nil {
			c.metrics.refusedBeforeRead("unauthenticated")
			return ctx, err
		}
		ctx = withPrincipal(ctx, digest)
	}
	ctx = withBudget(ctx, c.budget) // handlers that hold more than their request reserve it from here
	if !c.reserves(info.FullMethodName) {
		return ctx, nil
	}
	r, err := c.budget.reserve()
	if err != nil && exempt {
		// A health check the full budget refuses takes a place of its own: probes pass a flood.
		r, _ = c.health.reserve()
	}
	if r == nil {
		c.metrics.refusedBeforeRead("inflight_budget")
		return ctx, err
	}
	return withReservation(ctx, r), nil
}
