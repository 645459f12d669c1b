package server

import (
	"testing"
	"time"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHealthWatchEndsAtShutdown: an open grpc.health.v1 Health/Watch stream (one per connection for
// clients with client-side health checking, and the README's grpcurl example) is told NOT_SERVING
// and then ended with UNAVAILABLE, SERVER_SHUTTING_DOWN, so that Shutdown stops gracefully instead of
// waiting out the grace period (issue 7: "SIGTERM sets health NOT_SERVING, ... GracefulStop within
// the grace period").
func TestHealthWatchEndsAtShutdown(t *testing.T) {
	ts := newTestServer(t, nil, WithGracePeriod(time.Hour))
	client := healthpb.NewHealthClient(ts.conn)
	watches := make([]healthpb.Health_WatchClient, 3)
	for i := range watches {
		w, err := client.Watch(testContext(t), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := w.Recv(); err != nil || got.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("first Watch frame = %v, %v; want SERVING", got, err)
		}
		watches[i] = w
	}
	if err := ts.Shutdown(testContext(t)); err != nil {
		t.Errorf("Shutdown = %v, want a graceful stop", err)
	}
	for i, w := range watches {
		got, err := w.Recv()
		if err != nil || got.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("watch %d: frame after Shutdown = %v, %v; want NOT_SERVING", i, got, err)
			continue
		}
		_, err = w.Recv()
		checkStatus(t, err, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN, nil)
	}
}

// TestHealthWatchAfterShutdown: a Watch that arrives once shutdown has begun ends at once rather
// than holding GracefulStop open.
func TestHealthWatchAfterShutdown(t *testing.T) {
	ts := newTestServer(t, nil, WithGracePeriod(time.Hour))
	ts.health.shutdown()
	w, err := healthpb.NewHealthClient(ts.conn).Watch(testContext(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Recv()
	checkStatus(t, err, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN, nil)
}
