package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// newTimedHistoryFixture is newInflightHistoryFixture with the waits on the client bounded by
// short timeouts, so that tests see them fire without waiting for the defaults.
func newTimedHistoryFixture(t *testing.T, per int, budget int64, body, idle time.Duration) *historyFixture {
	t.Helper()
	l := DefaultLimits()
	l.MaxRecvMsgSize, l.MaxInflightBytes = per, budget
	l.RequestBodyTimeout, l.StreamIdleTimeout = body, idle
	return newLimitedHistoryFixture(t, l)
}

// wantDeadline checks that err is DEADLINE_EXCEEDED whose message contains want.
func wantDeadline(t *testing.T, err error, want string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.DeadlineExceeded || !strings.Contains(st.Message(), want) {
		t.Fatalf("got %v %q, want DEADLINE_EXCEEDED with %q", st.Code(), st.Message(), want)
	}
}

// TestSlowlorisCallsGiveTheBudgetBack: the slowloris review: calls that send their headers and
// never a body (a unary method opened as a stream, an ImportBranchStream that sends nothing)
// reserve --max-recv-msg-size each; enough of them filled the budget for as long as their client
// kept them open, and every other call was refused INFLIGHT_BUDGET_EXCEEDED. Each now ends
// DEADLINE_EXCEEDED at the body timeout, gives its place back, and the victim's call goes through.
func TestSlowlorisCallsGiveTheBudgetBack(t *testing.T) {
	const per, calls = 64 << 10, 4
	for _, tc := range []struct {
		name string
		open func(context.Context, *historyFixture) (grpc.ClientStream, error)
		want string // in the status message
	}{
		{"unary headers only", func(ctx context.Context, f *historyFixture) (grpc.ClientStream, error) {
			return f.ts.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, historyv1.HistoryService_GetBranch_FullMethodName)
		}, "deadline exceeded"}, // grpc-go's own message: it reads a unary request before our code runs
		{"import stream idle from its headers", func(ctx context.Context, f *historyFixture) (grpc.ClientStream, error) {
			return f.c.ImportBranchStream(ctx)
		}, flagRequestBodyTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTimedHistoryFixture(t, per, calls*per, 100*time.Millisecond, time.Minute)
			b := f.create(t, nil)
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			var opened []grpc.ClientStream
			for range calls {
				cs, err := tc.open(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				opened = append(opened, cs)
			}
			for _, cs := range opened {
				// The server ends each call: its client never sends, so Recv returns its status.
				wantDeadline(t, cs.RecvMsg(new(historyv1.GetBranchResponse)), tc.want)
				if ctx.Err() != nil {
					t.Fatal("the test's own deadline ended the call: the server never did")
				}
			}
			eventually(t, "the idle calls' places given back", func() bool { return f.ts.tap.budget.reserved() == 0 })
			if _, err := f.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: b}); err != nil {
				t.Fatalf("a victim's GetBranch after the idle calls ended: %v", err)
			}
		})
	}
}

// TestImportStreamIdleBetweenChunks: an ImportBranchStream holds its reservation, and its buffer,
// between chunks; one whose client stops sending ends DEADLINE_EXCEEDED at the idle timeout, naming
// the flag, and gives it all back. A stream that keeps sending is not cut (the body timeout is for
// its first message only).
func TestImportStreamIdleBetweenChunks(t *testing.T) {
	const per = 64 << 10
	f := newTimedHistoryFixture(t, per, 64*per, time.Minute, 100*time.Millisecond)
	ctx := testContext(t)
	stream, err := f.c.ImportBranchStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&historyv1.ImportBranchStreamRequest{Data: []byte(`{"branch":`)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first chunk held", func() bool { return f.ts.tap.budget.reserved() > int64(per) })
	wantDeadline(t, stream.RecvMsg(new(historyv1.ImportBranchStreamResponse)), flagStreamIdleTimeout)
	eventually(t, "the idle import's reservation given back", func() bool { return f.ts.tap.budget.reserved() == 0 })
}

// TestHonestCallsWithinTheTimeouts: calls that send their requests as they go are not cut: a unary
// call, an import of several chunks, and an export read as it comes.
func TestHonestCallsWithinTheTimeouts(t *testing.T) {
	f := newTimedHistoryFixture(t, 64<<10, 64<<20, 5*time.Second, 5*time.Second)
	b := f.create(t, nil)
	f.instruction(t, b, strings.Repeat("z", 40<<10))
	ctx := testContext(t)
	stream, err := f.c.ExportBranchStream(ctx, &historyv1.ExportBranchStreamRequest{BranchId: b})
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("export: %v", err)
		}
		data = append(data, m.GetData()...)
	}
	imp, err := f.c.ImportBranchStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := imp.Send(&historyv1.ImportBranchStreamRequest{NewBranchId: true}); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 16 << 10 {
		if err := imp.Send(&historyv1.ImportBranchStreamRequest{Data: data[off:min(off+16<<10, len(data))]}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := imp.CloseAndRecv(); err != nil {
		t.Fatalf("import: %v", err)
	}
	eventually(t, "every reservation given back", func() bool { return f.ts.tap.budget.reserved() == 0 })
}

// TestAppendStreamIdleIsNotCut: an AppendMessages stream waits for its next item for as long as it
// lives (recv_timeout.go): a client's Appender keeps one stream and sends items when it has them,
// and ending it after --stream-idle-timeout would fail whichever item raced the end. The stream is
// left idle for several idle timeouts, then carries an item.
func TestAppendStreamIdleIsNotCut(t *testing.T) {
	const idle = 50 * time.Millisecond
	f := newTimedHistoryFixture(t, 64<<10, 64<<20, time.Minute, idle)
	b := f.create(t, nil)
	ctx := testContext(t)
	stream, err := f.c.AppendMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&historyv1.AppendMessagesRequest{Window: 4}); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := stream.Recv() // the item's answer, or the stream's end
		ended <- err
	}()
	select {
	case err := <-ended:
		t.Fatalf("the idle AppendMessages stream ended: %v", err)
	case <-time.After(10 * idle): // an observation window, not a synchronisation: nothing may come
	}
	item := &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{
		Instruction: &historyv1.InstructionInput{InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "after a pause"}},
	}}
	if err := stream.Send(&historyv1.AppendMessagesRequest{Item: item}); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("the item after the pause: %v", err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// TestRecvWatchFiredBeforeItsStatus: the watch writes the call's status through the transport,
// whose finishStream cancels the stream's context at once; whatever that wakes (the handler's
// Recv, the logging link) must read DEADLINE_EXCEEDED, so the watch is marked fired first (review
// of this change: the handler and the log saw CANCELED while the client saw DEADLINE_EXCEEDED).
func TestRecvWatchFiredBeforeItsStatus(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	ctx := withRecvWatch(parent, 10*time.Millisecond, 0)
	w := recvWatchFrom(ctx)
	seen := make(chan error, 1)
	end := func(*status.Status) error {
		cancelParent() // the transport's finishStream cancels the stream's context
		<-ctx.Done()
		seen <- ctx.Err() // what a Recv woken now reports
		return nil
	}
	w.end.Store(&end)
	if err := <-seen; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Recv woken by the watch's status write sees %v, want DeadlineExceeded", err)
	}
}

// readAtTheEnd is a stream whose message arrives just as the watch ends the call.
type readAtTheEnd struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *readAtTheEnd) Context() context.Context { return s.ctx }
func (s *readAtTheEnd) RecvMsg(any) error {
	<-s.ctx.Done() // the watch fired; the message (or the client's io.EOF) is read now
	return nil
}

// TestRecvReadAsTheWatchFires: a message read as the timer ends the call is not handed to the
// handler, which gets the timeout instead: the client was told DEADLINE_EXCEEDED, and an import
// that went on to commit would write what its client was told failed (review of this change).
func TestRecvReadAsTheWatchFires(t *testing.T) {
	for _, first := range []bool{true, false} {
		ctx := withRecvWatch(context.Background(), 10*time.Millisecond, 10*time.Millisecond)
		w := recvWatchFrom(ctx)
		if !first && !w.bodyRead() { // the first message read in time; the idle wait is the one timed
			t.Fatal("the body's watch fired before it was read")
		}
		ts := &timedStream{ServerStream: &readAtTheEnd{ctx: ctx}, w: w, first: first}
		if err := ts.RecvMsg(nil); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("first=%v: RecvMsg of a message read as the watch fired = %v, want DEADLINE_EXCEEDED", first, err)
		}
	}
}
