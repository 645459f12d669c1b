package server

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// stuckAppendStream is an AppendMessages stream whose client sends what recv holds and never reads
// an answer: every send blocks until the stream's context ends, as a send blocked in HTTP/2 flow
// control ends when the handler returns (the test cancels the context once the handler returned).
type stuckAppendStream struct {
	grpc.ServerStream
	ctx       context.Context
	recv      chan *historyv1.AppendMessagesRequest
	receiving chan struct{} // told when a Recv finds nothing to read and waits
	sending   chan struct{} // told when a send starts
}

func newStuckAppendStream(t *testing.T) *stuckAppendStream {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // ends the sends and Recvs still blocked, so no goroutine outlives the test
	return &stuckAppendStream{ctx: ctx, recv: make(chan *historyv1.AppendMessagesRequest, 8),
		receiving: make(chan struct{}, 1), sending: make(chan struct{}, 1)}
}

func (f *stuckAppendStream) Context() context.Context { return f.ctx }

func (f *stuckAppendStream) Recv() (*historyv1.AppendMessagesRequest, error) {
	select {
	case m := <-f.recv:
		return m, nil
	default:
	}
	select {
	case f.receiving <- struct{}{}:
	default:
	}
	select {
	case m := <-f.recv:
		return m, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

func (f *stuckAppendStream) Send(m *historyv1.AppendMessagesResponse) error { return f.SendMsg(m) }

func (f *stuckAppendStream) SendMsg(any) error {
	select {
	case f.sending <- struct{}{}:
	default:
	}
	<-f.ctx.Done()
	return f.ctx.Err()
}

// runStuckAppend runs the handler on f and returns where its error will be.
func runStuckAppend(hs *HistoryServer, f *stuckAppendStream) <-chan error {
	done := make(chan error, 1)
	go func() { done <- hs.AppendMessages(f) }()
	return done
}

// waitFor waits for c, failing the test after a deadline with what.
func waitFor[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestAppendShutdownWhileSendBlocked: issue 21 review, finding A: a client that keeps its stream
// open but never reads must not hold the handler in Send past shutdown; it ends UNAVAILABLE
// SERVER_SHUTTING_DOWN, as the watch streams do (issue 5: shutdown ends streams cleanly).
func TestAppendShutdownWhileSendBlocked(t *testing.T) {
	hs := NewHistoryServer(store.NewMemory(), zap.NewNop(), WithSendTimeout(time.Hour))
	f := newStuckAppendStream(t)
	f.recv <- &historyv1.AppendMessagesRequest{Item: instructionReq(uuid.NewString(), "x")} // answered NOT_FOUND
	done := runStuckAppend(hs, f)
	waitFor(t, "the answer's send", f.sending)
	hs.EndStreams()
	err := waitFor(t, "the handler to end at shutdown while its send is blocked", done)
	wantStatusInfo(t, toStatus(err), codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN)
}

// TestAppendShutdownWhileFirstRecvBlocked: finding A, the first Recv: a client that opens the
// stream and sends nothing does not hold shutdown either.
func TestAppendShutdownWhileFirstRecvBlocked(t *testing.T) {
	hs := NewHistoryServer(store.NewMemory(), zap.NewNop())
	f := newStuckAppendStream(t)
	done := runStuckAppend(hs, f)
	waitFor(t, "the first Recv", f.receiving)
	hs.EndStreams()
	err := waitFor(t, "the handler to end at shutdown while its first Recv is blocked", done)
	wantStatusInfo(t, toStatus(err), codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN)
}

// TestAppendSendTimeout: finding A: an answer the client does not accept within the send timeout
// ends the stream as the watch streams end for a client that stopped reading (stream.go,
// WithSendTimeout: RESOURCE_EXHAUSTED SUBSCRIBER_TOO_SLOW), with no shutdown needed.
func TestAppendSendTimeout(t *testing.T) {
	hs := NewHistoryServer(store.NewMemory(), zap.NewNop(), WithSendTimeout(50*time.Millisecond))
	f := newStuckAppendStream(t)
	for range 3 { // a window's worth: the later items are waited for, not sent
		f.recv <- &historyv1.AppendMessagesRequest{Item: instructionReq(uuid.NewString(), "x")}
	}
	err := waitFor(t, "the handler to end after the send timeout", runStuckAppend(hs, f))
	wantStatusInfo(t, toStatus(err), codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW)
}
