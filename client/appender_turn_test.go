package client_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// stalledAppends is an AppendMessages server that reads the window and then nothing: a server
// that has stopped reading, so that HTTP/2 flow control stops the client's sends.
type stalledAppends struct {
	historyv1.UnimplementedHistoryServiceServer
}

func (stalledAppends) AppendMessages(stream historyv1.HistoryService_AppendMessagesServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// Append's ctx bounds its wait (its doc): for a place in the window, and for its turn to send. An
// Append whose send is held by flow control (the server has stopped reading) held the Appender's
// lock through the send, so every other Append waited for it past its own deadline (a review's
// find). Here the first 1 MiB item fills the stream's flow-control window; of the two next ones,
// each with a short deadline, one is held in its send and the other must end at its deadline.
func TestAppenderWaitForTurnHonoursContext(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A fixed 64 KiB window (no BDP estimation growing it): the server grants no more once its
	// handler stops reading.
	gs := grpc.NewServer(grpc.InitialWindowSize(1<<16), grpc.InitialConnWindowSize(1<<16))
	historyv1.RegisterHistoryServiceServer(gs, stalledAppends{})
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	c := dial(t, lis.Addr().String())

	apCtx, stop := context.WithCancel(testContext(t))
	ap := c.NewAppender(apCtx, client.WithAppendWindow(8))
	big := func() *historyv1.AddMessageRequest {
		return &historyv1.AddMessageRequest{BranchId: "00000000-0000-4000-8000-000000000001", Input: instruction(strings.Repeat("x", 1<<20))}
	}
	_ = ap.Append(apCtx, big()) // queued in the transport, past the window: nothing more goes out

	ended := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(apCtx, 200*time.Millisecond)
			defer cancel()
			ended <- (<-ap.Append(ctx, big())).Err
		}()
	}
	select {
	case err := <-ended:
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("an Append waiting for its turn to send ended with %v, want DEADLINE_EXCEEDED", err)
		}
	case <-time.After(10 * time.Second): // a failure bound, not synchronisation
		t.Error("an Append waiting behind a send held by flow control was still waiting 10 s later, past its 200 ms deadline")
	}
	stop() // the stream ends: the Append held in its send fails as broken
	<-ended
	_ = ap.Close()
}
