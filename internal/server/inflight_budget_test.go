package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestInflightBudget: issue 11 "an in-flight request budget (--max-inflight-bytes) that fails fast:
// each unary call reserves --max-recv-msg-size when it starts ... and gets RESOURCE_EXHAUSTED when
// the reservation does not fit", with figures and the flag; a reservation is given back when its
// call ends; health checks have a pool of their own and server streams reserve nothing, so neither
// is refused by a full budget.
func TestInflightBudget(t *testing.T) {
	const per = 1 << 20
	entered := make(holdEntered, 4)
	ts := newTestServer(t, func(s *grpc.Server) { registerProbe(s); registerHold(entered)(s) },
		WithLimits(Limits{MaxRecvMsgSize: per, MaxInflightBytes: 2 * per}))
	budget := ts.tap.budget

	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, 2)
	for i := range cancels {
		ctx, cancel := context.WithCancel(testContext(t))
		cancels[i] = cancel
		wg.Go(func() { _ = ts.conn.Invoke(ctx, holdUnaryMethod, structpb.NewStringValue("hold"), new(structpb.Value)) })
		<-entered
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	}()
	if got := budget.reserved(); got != 2*per {
		t.Fatalf("reserved with two calls in progress = %d, want %d", got, 2*per)
	}

	err := callProbeUnaryOn(ts, "ok")
	ei := wantStatusInfo(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_INFLIGHT_BUDGET_EXCEEDED)
	want := map[string]string{"reservedBytes": "2097152", "requestBytes": "1048576", "budgetBytes": "2097152", "flag": "--max-inflight-bytes"}
	for k, v := range want {
		if ei.GetMetadata()[k] != v {
			t.Errorf("ErrorInfo metadata %s = %q, want %q (all: %v)", k, ei.GetMetadata()[k], v, ei.GetMetadata())
		}
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "--max-inflight-bytes") || !strings.Contains(msg, "2097152") {
		t.Errorf("message %q does not give the figures and the flag", msg)
	}

	// Health checks and server streams pass a full budget.
	if _, err := healthpb.NewHealthClient(ts.conn).Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check with the budget full: %v", err)
	}
	sctx, scancel := context.WithCancel(testContext(t))
	openHoldStream(t, sctx, ts.conn)
	<-entered
	scancel()

	// A call that ends gives its share back; the next call fits.
	cancels[0]()
	eventually(t, "the cancelled call's reservation", func() bool { return budget.reserved() == per })
	if err := callProbeUnaryOn(ts, "ok"); err != nil {
		t.Errorf("a call after one ended: %v", err)
	}
	cancels[1]()
	wg.Wait()
	eventually(t, "every reservation given back", func() bool { return budget.reserved() == 0 })
}

// callProbeUnaryOn calls the probe's unary method on ts's connection.
func callProbeUnaryOn(ts *testServer, what string) error {
	return ts.conn.Invoke(context.Background(), probeUnaryMethod, structpb.NewStringValue(what), new(structpb.Value))
}

// wantStatusInfo checks err's code and ErrorInfo reason and returns the ErrorInfo.
func wantStatusInfo(t *testing.T, err error, code codes.Code, reason historyv1.ErrorReason) interface{ GetMetadata() map[string]string } {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("err = %v, want %v", err, code)
	}
	ei := errorInfoOf(err)
	if ei.GetReason() != reason.String() {
		t.Fatalf("ErrorInfo = %v, want reason %v", ei, reason)
	}
	return ei
}

// TestInflightReleasedOnEveryEnding: issue 11: "make sure every reservation is released, including
// on cancel/failure". Each way a call can end gives its reservation back.
func TestInflightReleasedOnEveryEnding(t *testing.T) {
	// Room for every hold handler's signal, so that none blocks; each case drains what earlier
	// cases left (a handler may start after its call ended), and the client stream waits for its
	// reservation itself rather than for a signal that may be an earlier call's.
	entered := make(holdEntered, 16)
	ts := newTestServer(t, func(s *grpc.Server) { registerProbe(s); registerHold(entered)(s) })
	budget := ts.tap.budget
	tests := []struct {
		name string
		call func(t *testing.T, ctx context.Context) error
		code codes.Code
	}{
		{"ok", func(_ *testing.T, ctx context.Context) error { return callProbeUnary(ctx, ts.conn, "ok") }, codes.OK},
		{"handler error", func(_ *testing.T, ctx context.Context) error { return callProbeUnary(ctx, ts.conn, "field") }, codes.InvalidArgument},
		{"handler panic", func(_ *testing.T, ctx context.Context) error { return callProbeUnary(ctx, ts.conn, "panic") }, codes.Internal},
		{"malformed request", func(_ *testing.T, ctx context.Context) error { return rawUnary(ctx, ts.conn, []byte{0xff, 0xff}) }, codes.InvalidArgument},
		{"unknown method", func(_ *testing.T, ctx context.Context) error {
			return ts.conn.Invoke(ctx, "/historyd.test.Nothing/Here", structpb.NewStringValue("x"), new(structpb.Value))
		}, codes.Unimplemented},
		{"over the receive limit", func(_ *testing.T, ctx context.Context) error {
			return callProbeUnary(ctx, ts.conn, strings.Repeat("x", DefaultMaxRecvMsgSize))
		}, codes.ResourceExhausted},
		{"deadline", func(_ *testing.T, ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return ts.conn.Invoke(ctx, holdUnaryMethod, structpb.NewStringValue("hold"), new(structpb.Value))
		}, codes.DeadlineExceeded},
		{"client cancels", func(_ *testing.T, ctx context.Context) error {
			ctx, cancel := context.WithCancel(ctx)
			go func() { <-entered; cancel() }() // ends when the handler has started
			return ts.conn.Invoke(ctx, holdUnaryMethod, structpb.NewStringValue("hold"), new(structpb.Value))
		}, codes.Canceled},
		{"client stream cancelled", func(t *testing.T, ctx context.Context) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			desc := holdDesc(nil).Streams[1]
			stream, err := ts.conn.NewStream(ctx, &desc, holdClientMethod)
			if err != nil {
				return err
			}
			eventually(t, "the client stream's reservation", func() bool { return budget.reserved() == DefaultMaxRecvMsgSize })
			cancel()
			return stream.RecvMsg(new(structpb.Value))
		}, codes.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for len(entered) > 0 {
				<-entered
			}
			err := tc.call(t, testContext(t))
			if status.Code(err) != tc.code {
				t.Fatalf("call = %v, want %v", err, tc.code)
			}
			eventually(t, "the reservation given back", func() bool { return budget.reserved() == 0 })
		})
	}
}

// TestInflightBudgetReserve: reserve refuses without taking anything, release gives back once.
func TestInflightBudgetReserve(t *testing.T) {
	var delta int64
	b := newInflightBudget(10, 4, "--flag", func(d int64) { delta += d })
	r1, err := b.reserve()
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.reserve()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.reserve(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third reservation of 4 in 10: %v, want RESOURCE_EXHAUSTED", err)
	}
	if b.reserved() != 8 || delta != 8 {
		t.Fatalf("reserved %d (gauge %d), want 8: a refusal took something", b.reserved(), delta)
	}
	r1.release()
	r1.release()
	if b.reserved() != 4 || delta != 4 {
		t.Fatalf("after releasing one twice: reserved %d (gauge %d), want 4", b.reserved(), delta)
	}
	r2.release()
	if b.reserved() != 0 || delta != 0 {
		t.Fatalf("after releasing both: reserved %d (gauge %d), want 0", b.reserved(), delta)
	}
}
