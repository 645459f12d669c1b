package server

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
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

// TestHealthServiceNameBounded: ADR-0009, "a request whose service name is longer than 1 KiB is
// refused, INVALID_ARGUMENT, before health.Server sees it, so no Watch keeps a large name" (a
// Watch kept it, up to --max-recv-msg-size, for the life of its stream, in no budget).
func TestHealthServiceNameBounded(t *testing.T) {
	ts := newTestServer(t, nil, WithAuthTokens(mustTokens(t, testToken)))
	health := healthpb.NewHealthClient(ts.conn)
	long := &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 3<<20)}

	w, err := health.Watch(testContext(t), long)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Recv()
	wantStatusInfo(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
	_, err = health.Check(testContext(t), long)
	wantStatusInfo(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)

	// A name of 1 KiB is any service's.
	resp, err := health.Check(testContext(t), &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 1<<10)})
	if status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service of 1 KiB: %v, %v; want NOT_FOUND", resp, err)
	}
	eventually(t, "every place given back", func() bool { return ts.tap.health.reserved() == 0 })
}

// TestHealthWatchesWithoutTokenCapped: ADR-0009, "Health.Watch streams opened without a valid
// token are at most --max-connections at once, RESOURCE_EXHAUSTED, TOO_MANY_STREAMS past it": more
// of them than the health pool has places open (a Watch gives its place back once its request is
// read), the one past the cap is refused, a Watch with a token is not, and a slot freed is taken
// again.
func TestHealthWatchesWithoutTokenCapped(t *testing.T) {
	const maxWatches = healthInflightCalls + 2
	ts := newTestServer(t, nil, WithAuthTokens(mustTokens(t, testToken)), WithLimits(Limits{MaxConnections: maxWatches}))
	health := healthpb.NewHealthClient(ts.conn)
	watch := func(ctx context.Context) error {
		w, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = w.Recv()
		return err
	}
	ctx, cancelFirst := context.WithCancel(testContext(t))
	defer cancelFirst()
	if err := watch(ctx); err != nil {
		t.Fatalf("watch 1: %v", err)
	}
	for i := 1; i < maxWatches; i++ {
		if err := watch(testContext(t)); err != nil {
			t.Fatalf("watch %d: %v", i+1, err)
		}
	}
	ei := wantStatusInfo(t, watch(testContext(t)), codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS)
	if md := ei.GetMetadata(); md["maxStreams"] != strconv.Itoa(maxWatches) || md["flag"] != "--max-connections" {
		t.Errorf("ErrorInfo metadata %v, want maxStreams %d, flag --max-connections", md, maxWatches)
	}
	if err := watch(withToken(testContext(t), testToken)); err != nil {
		t.Errorf("a Watch with a token past the cap on those without: %v", err)
	}

	cancelFirst()
	tick := time.NewTicker(10 * time.Millisecond) // until the server has seen the cancel
	defer tick.Stop()
	for {
		err := watch(testContext(t))
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a Watch once one ended: %v", err)
		}
		<-tick.C
	}
}
