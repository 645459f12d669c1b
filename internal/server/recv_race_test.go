package server

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestRecvStaleTimerSparesTheNextWait: a timer that fired as its message was read (its goroutine
// started, not yet at its compare-and-swap) must not end the next wait, which arm's Reset cannot
// prevent: a fired AfterFunc cannot be called back (second review of the waits). The stale run is
// made by calling expire after read and arm.
func TestRecvStaleTimerSparesTheNextWait(t *testing.T) {
	ctx := withRecvWatch(context.Background(), time.Hour, time.Hour)
	w := recvWatchFrom(ctx)
	// The body timer fires as the first message is read: its goroutine starts (timer.Stop in read
	// returns false) but is descheduled before its CompareAndSwap.
	if !w.bodyRead() {
		t.Fatal("read lost")
	}
	// The handler asks for the next message: arm moves done -> armed, Reset(1h).
	if !w.arm(time.Hour) {
		t.Fatal("arm failed")
	}
	w.expire() // the stale goroutine of the body timer now runs
	if ctx.Err() != nil {
		t.Fatalf("a stale firing of the body timer ended a wait armed for 1h just now: %v (%v)", ctx.Err(), context.Cause(ctx))
	}
}

// TestRecvUnaryLostRaceIsLogged: a unary call whose body was read as the timer fired is answered
// by inflight.unary, the outermost link, with its DEADLINE_EXCEEDED, before the metrics and logging
// links; it must not be marked chained, so that unchainedLogger logs it (second review of the
// waits: it was logged nowhere). Driven as grpc-go drives it: TagRPC, the tap's watch, the body
// read (its timer fires meanwhile), the unary chain, then the stats End.
func TestRecvUnaryLostRaceIsLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	logger := zap.New(core)
	o := defaultOptions()
	o.inflight = newInflight()
	o.metrics = NewMetrics()
	unary, _ := interceptorChain(logger, o)
	u := &unchainedLogger{logger: logger}
	method := historyv1.HistoryService_GetBranch_FullMethodName
	ctx := u.TagRPC(context.Background(), &stats.RPCTagInfo{FullMethodName: method})
	ctx = withRecvWatch(ctx, 10*time.Millisecond, 0)
	<-ctx.Done() // the body's bytes came; the timer fired while they were decoded
	ran := false
	var chain grpc.UnaryHandler = func(ctx context.Context, req any) (any, error) { ran = true; return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: method}
	for i := len(unary) - 1; i >= 0; i-- {
		next, ic := chain, unary[i]
		chain = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
	}
	_, err := chain(ctx, &historyv1.GetBranchRequest{})
	if ran || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("ran=%v err=%v", ran, err)
	}
	u.HandleRPC(ctx, &stats.End{Error: err, BeginTime: time.Now(), EndTime: time.Now()})
	if n := logs.FilterMessage("finished call").Len(); n != 1 {
		t.Fatalf("the call ended %v with %d log lines, want 1", status.Code(err), n)
	}
}
