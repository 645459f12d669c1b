package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The owners of the lease tests: A sends, B receives.
const (
	leaseA = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	leaseB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
)

// leaseOwners registers A and B through c, B with the lease settings of b (max_attempts,
// visibility_timeout; its owner_id is filled in).
func leaseOwners(t *testing.T, c *client.Client, b *historyv1.RegisterRequest) {
	t.Helper()
	b.OwnerId = leaseB
	for _, r := range []*historyv1.RegisterRequest{{OwnerId: leaseA}, b} {
		if _, err := c.Exchange.Register(testContext(t), r); err != nil {
			t.Fatal(err)
		}
	}
}

// mail sends one message from A to B per text through c and collects them into B's inbox; it
// returns their ids, in order.
func mail(t *testing.T, c *client.Client, texts ...string) []string {
	t.Helper()
	ctx := testContext(t)
	var ids []string
	for _, text := range texts {
		resp, err := c.Exchange.Send(ctx, &historyv1.SendRequest{Sender: leaseA, Recipient: client.Participant(leaseB), ContentJson: proto.String(fmt.Sprintf("%q", text))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetMessage().GetId())
	}
	if _, err := c.Exchange.Collect(ctx, &historyv1.CollectRequest{OwnerId: leaseA}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// inbox returns B's inboxes through c: the message ids and Receive's leases map.
func inbox(t *testing.T, c *client.Client) ([]string, map[string]*historyv1.LeaseState) {
	t.Helper()
	resp, err := c.Exchange.Receive(testContext(t), &historyv1.ReceiveRequest{OwnerId: leaseB, OmitRendered: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range resp.GetMessages() {
		ids = append(ids, m.GetId())
	}
	return ids, resp.GetLeases()
}

// handled records what a handler was given: each call's message id and attempt, in order.
type handled struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	id      string
	attempt int32
}

func (h *handled) add(m *historyv1.LeasedMessage) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call{m.GetMessage().GetId(), m.GetAttempt()})
	return len(h.calls)
}

func (h *handled) get() []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// leaseErrors collects what OnLeaseError reports.
type leaseErrors struct {
	mu   sync.Mutex
	errs []error
}

func (l *leaseErrors) option() client.HandleOption {
	return client.OnLeaseError(func(e *client.LeaseError) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.errs = append(l.errs, e)
	})
}

func (l *leaseErrors) get() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// handleInbox runs c.HandleInbox on B under ctx and returns its error; it fails the test if
// HandleInbox has not returned by testTimeout.
func handleInbox(t *testing.T, ctx context.Context, c *client.Client, h client.Handler, opts ...client.HandleOption) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.HandleInbox(ctx, leaseB, h, opts...) }()
	select {
	case err := <-done:
		return err
	case <-time.After(testTimeout + 10*time.Second):
		t.Fatal("HandleInbox did not return")
		return nil
	}
}

// Issue 18: "The Go client wraps it as a handler loop (lease, call the handler, ack or nack ...)":
// every message is handled once, on its first attempt, and acknowledged, so B's inboxes end empty.
func TestHandleInboxAcks(t *testing.T) {
	c := dial(t, startServer(t))
	leaseOwners(t, c, &historyv1.RegisterRequest{})
	ids := mail(t, c, "one", "two", "three", "four", "five")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var got handled
	var errs leaseErrors
	err := handleInbox(t, ctx, c, func(_ context.Context, m *historyv1.LeasedMessage) error {
		if got.add(m) == len(ids) {
			cancel() // HandleInbox still acknowledges this one before it returns
		}
		return nil
	}, client.HandleConcurrency(2), errs.option())
	if err != nil {
		t.Fatalf("HandleInbox = %v, want nil after its context ended", err)
	}
	calls := got.get()
	var handledIDs []string
	for _, c := range calls {
		if c.attempt != 1 {
			t.Errorf("message %s handled on attempt %d, want 1", c.id, c.attempt)
		}
		handledIDs = append(handledIDs, c.id)
	}
	slices.Sort(handledIDs)
	if want := slices.Sorted(slices.Values(ids)); !slices.Equal(handledIDs, want) {
		t.Errorf("handled %v, want each of %v once", handledIDs, want)
	}
	if left, _ := inbox(t, c); len(left) != 0 {
		t.Errorf("B's inboxes hold %v after every handler returned nil, want none: not acknowledged", left)
	}
	if e := errs.get(); len(e) != 0 {
		t.Errorf("lease errors %v", e)
	}
}

// Issue 18: "Nack (visible again, optionally after a delay)": a handler's error nacks the message,
// which comes back with attempt 2 once the delay (HandleNackDelay) has passed; its second handling
// succeeds and acknowledges it.
func TestHandleInboxNackRedelivers(t *testing.T) {
	c := dial(t, startServer(t))
	leaseOwners(t, c, &historyv1.RegisterRequest{})
	ids := mail(t, c, "flaky")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	const delay = 200 * time.Millisecond
	var got handled
	var mu sync.Mutex // the two calls run on different goroutines, ordered only through the server
	var failedAt time.Time
	var again time.Duration
	err := handleInbox(t, ctx, c, func(_ context.Context, m *historyv1.LeasedMessage) error {
		mu.Lock()
		defer mu.Unlock()
		if got.add(m) == 1 {
			failedAt = time.Now()
			return errors.New("not this time")
		}
		again = time.Since(failedAt)
		cancel()
		return nil
	}, client.HandleNackDelay(delay))
	if err != nil {
		t.Fatalf("HandleInbox = %v", err)
	}
	if want := []call{{ids[0], 1}, {ids[0], 2}}; !slices.Equal(got.get(), want) {
		t.Fatalf("handled %v, want %v: the failed message again with attempt 2", got.get(), want)
	}
	if again < delay {
		t.Errorf("the nacked message came back after %v, want at least the delay %v", again, delay)
	}
	if left, _ := inbox(t, c); len(left) != 0 {
		t.Errorf("B's inboxes hold %v, want none", left)
	}
}

// Issue 18: "After max_attempts it becomes a dead letter with reason DEAD_LETTER_REASON_MAX_ATTEMPTS
// and its attempt count": B allows 2 attempts and its handler always fails; the second Nack makes
// the message B's dead letter, and it is not handled a third time.
func TestHandleInboxMaxAttempts(t *testing.T) {
	c := dial(t, startServer(t))
	leaseOwners(t, c, &historyv1.RegisterRequest{MaxAttempts: 2})
	ids := mail(t, c, "poison")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var got handled
	err := handleInbox(t, ctx, c, func(_ context.Context, m *historyv1.LeasedMessage) error {
		if got.add(m) == 2 {
			cancel() // HandleInbox nacks this one before it returns
		}
		return errors.New("always fails")
	})
	if err != nil {
		t.Fatalf("HandleInbox = %v", err)
	}
	if want := []call{{ids[0], 1}, {ids[0], 2}}; !slices.Equal(got.get(), want) {
		t.Fatalf("handled %v, want %v", got.get(), want)
	}
	dl, err := c.Exchange.ListDeadLetters(testContext(t), &historyv1.ListDeadLettersRequest{OwnerId: leaseB})
	if err != nil {
		t.Fatal(err)
	}
	if d := dl.GetDeadLetters(); len(d) != 1 || d[0].GetMessage().GetId() != ids[0] ||
		d[0].GetReason() != historyv1.DeadLetterReason_DEAD_LETTER_REASON_MAX_ATTEMPTS || d[0].GetAttempts() != 2 {
		t.Errorf("B's dead letters %v, want %s with reason MAX_ATTEMPTS and attempts 2", d, ids[0])
	}
	if left, _ := inbox(t, c); len(left) != 0 {
		t.Errorf("B's inboxes hold %v, want none: the dead letter left them", left)
	}
}

// extensions counts the successful ExtendLease calls and closes reached once there are n.
type extensions struct {
	mu      sync.Mutex
	n, want int
	reached chan struct{}
}

func (e *extensions) option() client.Option {
	return client.WithDialOptions(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && method == "/historyd.v1.ExchangeService/ExtendLease" {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.n++; e.n == e.want {
				close(e.reached)
			}
		}
		return err
	}))
}

// Issue 18: the loop "extends [the lease] while the handler runs": B's leases last 1 s; a handler
// that runs until its lease was extended 3 times (about 1.5 s) keeps its message: it is handled
// once (with 2 handler slots, a redelivery would be handed to the second), its Ack holds, and no
// extension failed. No HandleVisibility: the loop extends by the length the lease was given.
func TestHandleInboxExtendsSlowHandler(t *testing.T) {
	addr := startServer(t)
	ext := &extensions{want: 3, reached: make(chan struct{})}
	c := dial(t, addr, ext.option())
	const visibility = time.Second
	leaseOwners(t, c, &historyv1.RegisterRequest{VisibilityTimeout: durationpb.New(visibility)})
	ids := mail(t, c, "slow")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var got handled
	var errs leaseErrors
	var ran time.Duration
	err := handleInbox(t, ctx, c, func(hctx context.Context, m *historyv1.LeasedMessage) error {
		start := time.Now()
		got.add(m)
		select {
		case <-ext.reached:
		case <-hctx.Done():
			return hctx.Err()
		}
		ran = time.Since(start)
		cancel()
		return nil
	}, client.HandleConcurrency(2), errs.option())
	if err != nil {
		t.Fatalf("HandleInbox = %v", err)
	}
	if want := []call{{ids[0], 1}}; !slices.Equal(got.get(), want) {
		t.Errorf("handled %v, want %v only: the extended lease must not end", got.get(), want)
	}
	if ran <= visibility {
		t.Errorf("the handler ran %v, not past its %v lease: the test proves nothing", ran, visibility)
	}
	if e := errs.get(); len(e) != 0 {
		t.Errorf("lease errors %v", e)
	}
	if left, _ := inbox(t, c); len(left) != 0 {
		t.Errorf("B's inboxes hold %v, want none: the Ack after the extensions holds", left)
	}
}

// HandleConcurrency(n) runs up to n handlers at once, and never more: the first 3 of 6 messages'
// handlers wait until all 3 run together.
func TestHandleInboxConcurrency(t *testing.T) {
	c := dial(t, startServer(t))
	leaseOwners(t, c, &historyv1.RegisterRequest{})
	ids := mail(t, c, "1", "2", "3", "4", "5", "6")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	const n = 3
	var mu sync.Mutex
	running, most, done := 0, 0, 0
	full := make(chan struct{})
	err := handleInbox(t, ctx, c, func(hctx context.Context, m *historyv1.LeasedMessage) error {
		mu.Lock()
		running++
		most = max(most, running)
		if running == n && most == n && done == 0 {
			close(full)
		}
		mu.Unlock()
		select {
		case <-full:
		case <-hctx.Done():
			return hctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		running--
		if done++; done == len(ids) {
			cancel()
		}
		return nil
	}, client.HandleConcurrency(n))
	if err != nil {
		t.Fatalf("HandleInbox = %v", err)
	}
	if most != n || done != len(ids) {
		t.Errorf("at most %d handlers at once and %d done, want %d at once and %d done", most, done, n, len(ids))
	}
	if left, _ := inbox(t, c); len(left) != 0 {
		t.Errorf("B's inboxes hold %v, want none", left)
	}
}

// The loop "resumes the stream on a retryable end": the connection is cut while the first
// message's handler runs; its Ack is retried on the new connection (Ack is a settlement, which a
// repeat cannot apply twice), the stream resumes, and the second message, leased only once the
// first is acknowledged (one slot), is handled too. Neither comes back.
func TestHandleInboxResumes(t *testing.T) {
	addr := startServer(t)
	direct := dial(t, addr)
	p := newProxy(t, addr)
	c := dial(t, p.Addr(), client.WithRetry(fastRetry))
	leaseOwners(t, direct, &historyv1.RegisterRequest{})
	ids := mail(t, direct, "before the cut", "after the cut")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var got handled
	var resumes []client.Resume
	err := handleInbox(t, ctx, c, func(_ context.Context, m *historyv1.LeasedMessage) error {
		switch got.add(m) {
		case 1:
			p.Cut()
		case 2:
			cancel()
		}
		return nil
	}, client.HandleRetry(fastRetry), client.OnHandleResume(func(r client.Resume) { resumes = append(resumes, r) }))
	if err != nil {
		t.Fatalf("HandleInbox = %v", err)
	}
	if want := []call{{ids[0], 1}, {ids[1], 1}}; !slices.Equal(got.get(), want) {
		t.Errorf("handled %v, want %v", got.get(), want)
	}
	if len(resumes) == 0 || status.Code(resumes[0].Cause) != codes.Unavailable {
		t.Errorf("resumes %+v, want one after the cut, caused by UNAVAILABLE", resumes)
	}
	if left, _ := inbox(t, direct); len(left) != 0 {
		t.Errorf("B's inboxes hold %v, want none", left)
	}
}

// A stream that fails for good ends HandleInbox with its error: an owner that is not registered.
func TestHandleInboxUnregisteredOwner(t *testing.T) {
	c := dial(t, startServer(t))
	err := handleInbox(t, testContext(t), c, func(context.Context, *historyv1.LeasedMessage) error {
		t.Error("handler called for an unregistered owner")
		return nil
	})
	if client.Reason(err) != historyv1.ErrorReason_ERROR_REASON_OWNER_NOT_REGISTERED || status.Code(err) != codes.FailedPrecondition {
		t.Errorf("HandleInbox = %v, want FAILED_PRECONDITION, OWNER_NOT_REGISTERED", err)
	}
}

// HandleDrain bounds the wait for a handler once HandleInbox's context ended: past it the
// handler's context is canceled, HandleInbox returns, and the message is left to its lease (still
// held, not acknowledged or nacked).
func TestHandleInboxDrainBound(t *testing.T) {
	c := dial(t, startServer(t))
	leaseOwners(t, c, &historyv1.RegisterRequest{})
	ids := mail(t, c, "stuck")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	started := make(chan struct{})
	var handlerErr error
	go func() {
		select {
		case <-started:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := handleInbox(t, ctx, c, func(hctx context.Context, _ *historyv1.LeasedMessage) error {
		close(started)
		<-hctx.Done() // a handler that runs until told to stop
		handlerErr = hctx.Err()
		return handlerErr
	}, client.HandleDrain(100*time.Millisecond), client.HandleVisibility(time.Minute))
	if err != nil {
		t.Fatalf("HandleInbox = %v", err)
	}
	if !errors.Is(handlerErr, context.Canceled) {
		t.Errorf("the handler's context ended with %v, want canceled after the drain", handlerErr)
	}
	left, leases := inbox(t, c)
	if !slices.Equal(left, ids) || !leases[ids[0]].GetLeased() || leases[ids[0]].GetAttempts() != 1 {
		t.Errorf("B's inboxes hold %v with leases %v, want %v still leased on attempt 1", left, leases, ids)
	}
}

// unleasedServer is an ExchangeService from before issue 18: its SubscribeInbox ignores `lease`
// and streams a heartbeat and then a plain message.
type unleasedServer struct {
	historyv1.UnimplementedExchangeServiceServer
}

func (unleasedServer) SubscribeInbox(_ *historyv1.SubscribeInboxRequest, s grpc.ServerStreamingServer[historyv1.SubscribeInboxResponse]) error {
	if err := s.Send(&historyv1.SubscribeInboxResponse{Event: &historyv1.SubscribeInboxResponse_Heartbeat{Heartbeat: &historyv1.Heartbeat{}}}); err != nil {
		return err
	}
	if err := s.Send(&historyv1.SubscribeInboxResponse{Event: &historyv1.SubscribeInboxResponse_Message{Message: &historyv1.Message{Id: "0c0ffee0-0000-4000-8000-000000000003"}}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return s.Context().Err()
}

// A server that streams unleased messages on a leasing stream ends HandleInbox with
// ErrLeasesUnsupported: handling them would acknowledge nothing.
func TestHandleInboxLeasesUnsupported(t *testing.T) {
	c := serveFake(t, func(gs *grpc.Server) { historyv1.RegisterExchangeServiceServer(gs, unleasedServer{}) })
	err := handleInbox(t, testContext(t), c, func(context.Context, *historyv1.LeasedMessage) error {
		t.Error("handler called for an unleased message")
		return nil
	})
	if !errors.Is(err, client.ErrLeasesUnsupported) {
		t.Errorf("HandleInbox = %v, want ErrLeasesUnsupported", err)
	}
}
