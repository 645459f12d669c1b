package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestTapRefusesBeforeTheBody: issue 11 "auth before bytes": a call without a valid token is
// refused from its headers: UNAUTHENTICATED with reason UNAUTHENTICATED, as the interceptor said
// before; its body is never read and it reserves nothing of the in-flight budget. Health checks
// stay open. grpc-go reads a unary body only after it has begun the RPC for its stats handlers, and
// the server's stats handler (unchainedLogger) logs every begun call the chain did not see: no
// line at all, from either, shows the call never began, so its body was never read.
func TestTapRefusesBeforeTheBody(t *testing.T) {
	m := NewMetrics()
	ts := newTestServer(t, registerProbe, WithAuthTokens(mustTokens(t, testToken)), WithMetrics(m))
	big := strings.Repeat("x", 3<<20)
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"no token", testContext(t)},
		{"wrong token", withToken(testContext(t), "wrong-token-0123456789abcdef")},
		{"not bearer", metadata.AppendToOutgoingContext(testContext(t), "authorization", "Basic "+testToken)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := callProbeUnary(tc.ctx, ts.conn, big)
			wantStatusInfo(t, err, codes.Unauthenticated, historyv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
			err = callProbeStream(tc.ctx, ts.conn, big)
			wantStatusInfo(t, err, codes.Unauthenticated, historyv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
		})
	}
	if n := len(ts.logs.FilterMessage("finished call").All()); n != 0 {
		t.Errorf("%d refused calls began (a line from the chain or from unchainedLogger), want 0", n)
	}
	if v, _ := metricValue(t, m, "historyd_calls_refused_before_read_total", map[string]string{"reason": "unauthenticated"}); v != 6 {
		t.Errorf("refused before read = %v, want 6", v)
	}
	if got := ts.tap.budget.reserved(); got != 0 {
		t.Errorf("refused calls reserved %d bytes", got)
	}
	if _, err := healthpb.NewHealthClient(ts.conn).Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without a token: %v", err)
	}
	if err := callProbeUnary(withToken(testContext(t), testToken), ts.conn, "ok"); err != nil {
		t.Errorf("call with the token: %v", err)
	}
}

// TestPrincipalFromContext: the tap gives every authenticated call a stable identity of its token,
// the same for the same token, different for another, never the token itself; "" without
// authentication and for the exempt health service.
func TestPrincipalFromContext(t *testing.T) {
	other := "other-token-0123456789abcdef"
	withAuth := &callTap{tokens: mustTokens(t, testToken, other), budget: newInflightBudget(1<<30, 1, "", nil), health: newInflightBudget(1<<30, 1, "", nil)}
	noAuth := &callTap{budget: withAuth.budget, health: withAuth.health}
	principal := func(c *callTap, method, tok string) string {
		t.Helper()
		md := metadata.MD{}
		if tok != "" {
			md.Set("authorization", "Bearer "+tok)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ctx, err := c.handle(ctx, &tap.Info{FullMethodName: method, Header: md})
		if err != nil {
			t.Fatalf("tap: %v", err)
		}
		return principalFromContext(ctx)
	}
	a1, a2, b := principal(withAuth, probeUnaryMethod, testToken), principal(withAuth, probeUnaryMethod, testToken), principal(withAuth, probeUnaryMethod, other)
	if a1 == "" || a1 != a2 || a1 == b || strings.Contains(testToken, a1) {
		t.Errorf("principals %q, %q (same token), %q (other token): want equal, non-empty, distinct, not the token", a1, a2, b)
	}
	if p := principal(noAuth, probeUnaryMethod, ""); p != "" {
		t.Errorf("principal without authentication = %q, want \"\"", p)
	}
	if p := principal(withAuth, "/grpc.health.v1.Health/Check", ""); p != "" {
		t.Errorf("principal of a health check = %q, want \"\"", p)
	}
}

// TestTapHealthPool: a health check reserves from the budget like any call and, when that is full,
// from a pool of healthInflightCalls places of its own, and no more: probes pass a flood, and
// health checks, which need no token, hold at most the budget plus the pool (ADR-0009).
func TestTapHealthPool(t *testing.T) {
	const per = 4
	c := &callTap{budget: newInflightBudget(2*per, per, flagMaxInflightBytes, nil), health: newInflightBudget(healthInflightCalls*per, per, flagMaxInflightBytes, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	tapped := func(method string) error {
		_, err := c.handle(ctx, &tap.Info{FullMethodName: method, Header: metadata.MD{}})
		return err
	}
	for range 2 {
		if err := tapped(probeUnaryMethod); err != nil {
			t.Fatal(err)
		}
	}
	if err := tapped(probeUnaryMethod); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call past the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	for i := range healthInflightCalls {
		if err := tapped("/grpc.health.v1.Health/Check"); err != nil {
			t.Fatalf("health check %d with the budget full: %v", i+1, err)
		}
	}
	if err := tapped("/grpc.health.v1.Health/Check"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a health check past the budget and its pool: %v, want RESOURCE_EXHAUSTED", err)
	}
	cancel() // every call's context ends: every reservation comes back
	eventually(t, "the reservations given back", func() bool { return c.budget.reserved() == 0 && c.health.reserved() == 0 })
}
