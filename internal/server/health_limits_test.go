package server

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

const healthCheckMethod = "/grpc.health.v1.Health/Check"

// stalledHealthChecks opens n Health/Check calls without a token that send their headers and never
// their body, as a client that wants to hold places would.
func stalledHealthChecks(t *testing.T, ctx context.Context, conn *grpc.ClientConn, n int) []grpc.ClientStream {
	t.Helper()
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	streams := make([]grpc.ClientStream, n)
	for i := range streams {
		s, err := conn.NewStream(ctx, desc, healthCheckMethod)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	return streams
}

// TestHealthCallsWithoutTokenLeaveTheBudget: ADR-0009, "a health call without a valid token, when
// tokens are on, reserves from the health pool only, never from --max-inflight-bytes": health
// calls that send their headers and never their body, as many as the budget and the pool hold,
// refuse no authenticated call.
func TestHealthCallsWithoutTokenLeaveTheBudget(t *testing.T) {
	ts := newTestServer(t, registerProbe, WithAuthTokens(mustTokens(t, testToken)))
	calls := int(ts.tap.budget.limit/ts.tap.budget.per) + healthInflightCalls
	stalledHealthChecks(t, testContext(t), ts.conn, calls)
	eventually(t, "the health pool full", func() bool { return ts.tap.health.reserved() == ts.tap.health.limit })

	if got := ts.tap.budget.reserved(); got != 0 {
		t.Errorf("health calls without a token reserved %d bytes of --max-inflight-bytes, want 0", got)
	}
	if err := callProbeUnary(withToken(testContext(t), testToken), ts.conn, "ok"); err != nil {
		t.Errorf("an authenticated call with %d health calls stalled: %v", calls, err)
	}
}

// TestHealthRequestMustArriveInTime: ADR-0009, "every health call's request must arrive within
// healthBodyTimeout of its headers, or its stream is ended, giving its place back": calls that
// hold every place of the health pool with their headers alone are ended by the server, and a
// probe passes again.
func TestHealthRequestMustArriveInTime(t *testing.T) {
	ts := newTestServer(t, nil, WithAuthTokens(mustTokens(t, testToken)))
	stalled := stalledHealthChecks(t, testContext(t), ts.conn, healthInflightCalls)
	eventually(t, "the health pool full", func() bool { return ts.tap.health.reserved() == ts.tap.health.limit })
	health := healthpb.NewHealthClient(ts.conn)
	if _, err := health.Check(testContext(t), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a probe with every place held: %v, want RESOURCE_EXHAUSTED", err)
	}

	// The client's own deadline is testTimeout: a stream still open then was not ended by the server.
	for i, s := range stalled {
		if err := s.RecvMsg(new(healthpb.HealthCheckResponse)); status.Code(err) != codes.Canceled {
			t.Errorf("stalled call %d ended %v, want CANCELED by the server's body deadline", i, err)
		}
	}
	eventually(t, "the places given back", func() bool { return ts.tap.health.reserved() == 0 })
	if _, err := health.Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("a probe once the stalled calls ended: %v", err)
	}
}
