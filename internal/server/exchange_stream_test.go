package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
)

// subscribe opens SubscribeInbox on client and returns it after the first frame, the heartbeat
// that says the subscription is live.
func subscribe(ctx context.Context, t *testing.T, client historyv1.ExchangeServiceClient, req *historyv1.SubscribeInboxRequest) historyv1.ExchangeService_SubscribeInboxClient {
	t.Helper()
	s, err := client.SubscribeInbox(ctx, req)
	if err != nil {
		t.Fatalf("SubscribeInbox: %v", err)
	}
	first, err := s.Recv()
	if err != nil {
		t.Fatalf("SubscribeInbox first frame: %v", err)
	}
	if first.GetHeartbeat() == nil {
		t.Fatalf("first frame %v, want a heartbeat", first)
	}
	return s
}

// nextMessage returns the next message frame, skipping heartbeats.
func nextMessage(t *testing.T, s historyv1.ExchangeService_SubscribeInboxClient) *historyv1.Message {
	t.Helper()
	for {
		f, err := s.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if m := f.GetMessage(); m != nil {
			return m
		}
	}
}

// streamEnd records the error the SubscribeInbox handler returned, so a test knows the stream
// ended on the server side before its client reads.
func (f *exchangeFixture) streamEnd() <-chan error {
	ended := make(chan error, 1)
	f.es.streamEnded = func(err error) { ended <- err }
	return ended
}

// recvEnd reads s until it ends and returns the final error.
func recvEnd(s historyv1.ExchangeService_SubscribeInboxClient) error {
	for {
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
}

func wait[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatal("timed out")
	}
	var zero T
	return zero
}

// TestSubscribeInboxLive: direct and broadcast messages reach the subscriber as they land, in
// order; a sender filter passes only that sender's inbox (issue 6 acceptance; docs/design.md#exchange).
func TestSubscribeInboxLive(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB, ownerC)
	ctx := testContext(t)
	all := subscribe(ctx, t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerB})
	fromC := subscribe(ctx, t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerB, Sender: proto.String(ownerC)})

	direct := f.send(t, ownerA, str(ownerB), `{"text":"direct"}`)
	bcast := f.send(t, ownerC, broadcast, `{"text":"broadcast"}`)
	f.collect(t, ownerA)
	f.collect(t, ownerC)
	for _, want := range []*historyv1.Message{direct, bcast} {
		if got := nextMessage(t, all); !proto.Equal(got, want) {
			t.Errorf("streamed %v, want %v", got, want)
		}
	}
	if got := nextMessage(t, fromC); got.GetId() != bcast.GetId() {
		t.Errorf("filtered stream got %v, want only C's broadcast", got)
	}
}

// TestSubscribeInboxHeartbeats: an idle stream gets heartbeats.
func TestSubscribeInboxHeartbeats(t *testing.T) {
	f := newExchangeFixture(t, nil, WithHeartbeat(5*time.Millisecond))
	f.register(t, ownerA)
	s := subscribe(testContext(t), t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerA})
	for range 3 {
		frame, err := s.Recv()
		if err != nil || frame.GetHeartbeat() == nil || !frame.GetHeartbeat().GetTime().IsValid() {
			t.Fatalf("frame %v, %v; want a heartbeat", frame, err)
		}
	}
}

// stalledClient is a client with HTTP/2 windows at their 64 KiB minimum (which also turns off
// window growth), so that a server stream blocks once that much is unread.
func stalledClient(t *testing.T, f *exchangeFixture) historyv1.ExchangeServiceClient {
	conn := f.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	return historyv1.NewExchangeServiceClient(conn)
}

// flood sends n messages of about 16 KiB from A to B and collects them: together far more than a
// stalled client's window.
func flood(t *testing.T, f *exchangeFixture, n int) {
	t.Helper()
	big := `"` + strings.Repeat("x", 16<<10) + `"`
	for range n {
		f.send(t, ownerA, str(ownerB), big)
	}
	if rep := f.collect(t, ownerA); int(rep.GetDeliveredCount()) != n { // returns: never waits for subscribers
		t.Fatalf("collect delivered %d, want %d", rep.GetDeliveredCount(), n)
	}
}

// TestSubscribeInboxEvictedWhenStalled: a subscriber that stops reading falls behind its bounded
// buffer and is ended with RESOURCE_EXHAUSTED, reason SUBSCRIBER_TOO_SLOW; the collect never waited
// for it and the messages are in the inbox (docs/development.md#style-streams; issue 6 acceptance).
func TestSubscribeInboxEvictedWhenStalled(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithSubscriberBuffer(1)}, WithSendTimeout(time.Hour))
	f.register(t, ownerA, ownerB)
	ended := f.streamEnd()
	s := subscribe(testContext(t), t, stalledClient(t, f), &historyv1.SubscribeInboxRequest{OwnerId: ownerB})
	flood(t, f, 32)
	if err := wait(t, ended); !errors.Is(err, exchange.ErrSubscriberTooSlow) {
		t.Errorf("handler ended with %v, want the eviction", err)
	}
	checkStatus(t, recvEnd(s), codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW, map[string]string{"ownerId": ownerB})
	inbox, err := f.client.Receive(testContext(t), &historyv1.ReceiveRequest{OwnerId: ownerB})
	if err != nil || len(inbox.GetMessages()) != 32 {
		t.Errorf("inbox holds %d messages (%v), want 32", len(inbox.GetMessages()), err)
	}
}

// TestSubscribeInboxSendTimeout: a client that stops reading while its buffer still has room is
// ended by the bounded send timeout, with RESOURCE_EXHAUSTED, reason SUBSCRIBER_TOO_SLOW.
func TestSubscribeInboxSendTimeout(t *testing.T) {
	// Room in messages, and at the default bytes: only the send timeout can end it.
	f := newExchangeFixture(t, []exchange.Option{exchange.WithSubscriberBuffer(1000)}, WithSendTimeout(50*time.Millisecond))
	f.register(t, ownerA, ownerB)
	ended := f.streamEnd()
	s := subscribe(testContext(t), t, stalledClient(t, f), &historyv1.SubscribeInboxRequest{OwnerId: ownerB})
	flood(t, f, 32)
	if err := wait(t, ended); !errors.Is(err, errSendTimeout) {
		t.Errorf("handler ended with %v, want the send timeout", err)
	}
	checkStatus(t, recvEnd(s), codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW, map[string]string{"ownerId": ownerB})
}

// TestSubscribeInboxOwnerLeaves: unregistering the owner ends its stream with FAILED_PRECONDITION,
// reason OWNER_NOT_REGISTERED.
func TestSubscribeInboxOwnerLeaves(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA)
	s := subscribe(testContext(t), t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerA})
	if _, err := f.client.Unregister(testContext(t), &historyv1.UnregisterRequest{OwnerId: ownerA}); err != nil {
		t.Fatal(err)
	}
	checkStatus(t, recvEnd(s), codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_OWNER_NOT_REGISTERED, map[string]string{"ownerId": ownerA})
}

// TestSubscribeInboxShutdown: server shutdown ends open inbox streams at once with UNAVAILABLE,
// reason SERVER_SHUTTING_DOWN, so Shutdown finishes without waiting out the grace period.
func TestSubscribeInboxShutdown(t *testing.T) {
	ex := exchange.New()
	t.Cleanup(ex.Close)
	var es *ExchangeServer
	ts := newTestServer(t, func(gs *grpc.Server) {
		es = NewExchangeServer(&exchange.MemoryService{X: ex})
		historyv1.RegisterExchangeServiceServer(gs, es)
	}, WithGracePeriod(time.Hour))
	ts.OnShutdown(es.EndStreams)
	client := historyv1.NewExchangeServiceClient(ts.conn)
	if _, err := client.Register(testContext(t), &historyv1.RegisterRequest{OwnerId: ownerA}); err != nil {
		t.Fatal(err)
	}
	s := subscribe(testContext(t), t, client, &historyv1.SubscribeInboxRequest{OwnerId: ownerA})
	if err := ts.Shutdown(testContext(t)); err != nil {
		t.Errorf("Shutdown = %v, want a graceful stop", err)
	}
	checkStatus(t, recvEnd(s), codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN, nil)
}

// TestExchangeBackgroundCollection: with background collection on, a sent message reaches the
// recipient's stream and inbox with no Collect call (issue 6 acceptance; LionAGI's Exchange.run).
func TestExchangeBackgroundCollection(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithBackgroundCollection(true)})
	f.register(t, ownerA, ownerB)
	s := subscribe(testContext(t), t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerB})
	sent := f.send(t, ownerA, str(ownerB), `"no collect needed"`)
	if got := nextMessage(t, s); got.GetId() != sent.GetId() {
		t.Errorf("streamed %v, want %v", got, sent)
	}
	inbox, err := f.client.Receive(testContext(t), &historyv1.ReceiveRequest{OwnerId: ownerB})
	if err != nil || len(inbox.GetMessages()) != 1 {
		t.Errorf("Receive = %v, %v; want the message", inbox, err)
	}
}
