package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// ErrLeasesUnsupported ends HandleInbox when the server streams unleased messages on a leasing
// SubscribeInbox: it predates leases (issue 18) and ignored the request's `lease`.
var ErrLeasesUnsupported = errors.New("client: HandleInbox: the server streamed an unleased message: it does not support leases")

// Handler handles one leased message. Returning nil acknowledges it (Ack: it is gone); an error
// gives it back (Nack: visible again after HandleNackDelay, a dead letter once the owner's
// max_attempts are spent). ctx carries the values of HandleInbox's context; it is canceled only
// when HandleInbox stops waiting for the handler (HandleDrain), not when HandleInbox's context ends.
type Handler func(ctx context.Context, m *historyv1.LeasedMessage) error

// LeaseError is a failed Ack, Nack or ExtendLease of HandleInbox, reported to OnLeaseError. A
// stale receipt (ERROR_REASON_LEASE_STALE) means the lease ran out and someone else took the
// message, or, after a retried call, that the first attempt had settled it.
type LeaseError struct {
	// Op is "Ack", "Nack" or "ExtendLease".
	Op string
	// Message is the leased message.
	Message *historyv1.LeasedMessage
	// Err is the call's error.
	Err error
}

// Error implements error.
func (e *LeaseError) Error() string {
	return fmt.Sprintf("client: %s of message %s, attempt %d: %v", e.Op, e.Message.GetMessage().GetId(), e.Message.GetAttempt(), e.Err)
}

// Unwrap returns the call's error.
func (e *LeaseError) Unwrap() error { return e.Err }

// HandleInbox is acknowledged delivery as a handler loop (issue 18; docs/decisions/0020-leases.md):
// it opens a leasing SubscribeInbox stream on owner's inboxes (SubscribeInboxRequest.lease), runs h
// on each leased message, up to HandleConcurrency at once, and acknowledges the message when h
// returns nil or nacks it when h returns an error. While h runs past half its lease, HandleInbox
// extends the lease (ExtendLease), so a slow handler keeps its message. When the stream ends
// because the connection broke, the server is going away or it was too slow (as Watch resumes),
// HandleInbox opens a new one; the leases of running handlers are not the stream's and carry on.
//
// HandleInbox returns nil once ctx ends, and an error when the stream fails for good: the owner is
// not registered (FAILED_PRECONDITION, ERROR_REASON_OWNER_NOT_REGISTERED), an invalid argument, a
// message too large for one frame (RESOURCE_EXHAUSTED, ERROR_REASON_RESPONSE_TOO_LARGE: the server
// gave it back; use HandleOmitRendered), ErrLeasesUnsupported from a server that predates leases,
// or the last error after the retry policy's MaxAttempts
// failed resumptions in a row. Either way it first stops leasing, gives back at once (Nack) the
// messages still waiting for a handler, and waits up to HandleDrain for the running handlers to
// return and their messages to be settled. A handler that ignores its context past that keeps
// running after HandleInbox returns, and its message is left to its lease's deadline.
//
// Delivery is at least once: a message whose handler finished but whose Ack was lost (the process
// died, the lease had run out and another receiver took it) is handled again, with a higher
// LeasedMessage.attempt. Failed settlements are reported to OnLeaseError.
func (c *Client) HandleInbox(ctx context.Context, owner string, h Handler, opts ...HandleOption) error {
	if h == nil {
		return errors.New("client: HandleInbox: nil handler")
	}
	o := defaultHandleOptions()
	for _, opt := range opts {
		opt(&o)
	}
	// The handlers and their settlements outlive ctx by the drain at most: hctx keeps ctx's values
	// but not its end, and stop cancels it.
	hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	l := &handleLoop{
		c: c, owner: owner, h: h, o: o, hctx: hctx,
		slots:    make(chan struct{}, o.concurrency),
		stopping: make(chan struct{}),
	}
	err := l.receive(ctx)
	close(l.stopping)
	l.drain(stop)
	return err
}

// handleStopGrace is how long HandleInbox still waits, after the drain ran out and the handlers'
// context was canceled, for the handlers that honour it to return.
const handleStopGrace = time.Second

// handleLoop is one HandleInbox. Its goroutines: the caller's, which receives (receive) and then
// waits (drain); one per leased message (run), counted by wg, ended by its handler's return or by
// stopping; and one keeper per message (keep), owned and awaited by its run.
type handleLoop struct {
	c     *Client
	owner string
	h     Handler
	o     handleOptions
	hctx  context.Context // the handlers' and settlements' context

	slots    chan struct{} // a token per running handler
	stopping chan struct{} // closed once no more messages are leased
	wg       sync.WaitGroup
}

// receive runs leasing streams until ctx ends (nil) or one fails for good (its error).
func (l *handleLoop) receive(ctx context.Context) error {
	req := &historyv1.SubscribeInboxRequest{
		OwnerId: l.owner, Sender: l.o.sender, OmitRendered: l.o.omitRendered,
		Lease: true, MaxInFlight: int32(l.o.concurrency), // #nosec G115: HandleConcurrency bounds it
	}
	if l.o.visibility > 0 {
		req.VisibilityTimeout = durationpb.New(l.o.visibility)
	}
	attempt := 0
	for {
		progressed, err := l.stream(ctx, req)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, io.EOF) && !resumable(err) {
			return err
		}
		if progressed {
			attempt = 0
		}
		attempt++
		if attempt > max(l.o.retry.MaxAttempts, 1) {
			return err
		}
		// A stream that had delivered something resumes at once.
		if attempt > 1 && !sleep(ctx, l.o.retry.backoff(attempt-1)) {
			return nil
		}
		if l.o.onResume != nil {
			l.o.onResume(Resume{Cause: err, Attempt: attempt})
		}
	}
}

// stream runs one leasing stream, starting a run for each leased message, until it ends; it
// reports whether the stream delivered anything past its first heartbeat.
func (l *handleLoop) stream(ctx context.Context, req *historyv1.SubscribeInboxRequest) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := l.c.Exchange.SubscribeInbox(ctx, req)
	if err != nil {
		return false, err
	}
	var offset time.Duration // the server's clock less ours, from the last heartbeat
	for first := true; ; first = false {
		resp, err := s.Recv()
		if err != nil {
			return progressed, err
		}
		switch f := resp.GetEvent().(type) {
		case *historyv1.SubscribeInboxResponse_Heartbeat:
			if t := f.Heartbeat.GetTime(); t != nil {
				offset = time.Until(t.AsTime())
			}
			progressed = progressed || !first // the first frame is always a heartbeat
		case *historyv1.SubscribeInboxResponse_Leased:
			progressed = true
			l.wg.Add(1)
			go l.run(f.Leased, l.length(f.Leased, offset))
		case *historyv1.SubscribeInboxResponse_Message:
			// A server from before issue 18 ignores `lease` and streams the messages unleased:
			// handling them would acknowledge nothing, so stop rather than pretend.
			return progressed, ErrLeasesUnsupported
		}
	}
}

// length is the lease length to extend m's lease by: HandleVisibility's, else what the lease was
// handed out with, its deadline less the server's time now (the leases' deadlines are in the
// server's clock, which may differ from ours by offset).
func (l *handleLoop) length(m *historyv1.LeasedMessage, offset time.Duration) time.Duration {
	d := l.o.visibility
	if d <= 0 && m.GetDeadline() != nil {
		d = m.GetDeadline().AsTime().Sub(time.Now().Add(offset)).Round(time.Millisecond)
	}
	return min(max(d, time.Millisecond), 12*time.Hour) // ExtendLease's bounds
}

// run handles one leased message: it waits for a handler slot, keeps the lease while it waits and
// while h runs, then acknowledges or nacks it. A message still waiting when the loop stops is
// given back at once; after the drain (hctx canceled) nothing is settled.
func (l *handleLoop) run(m *historyv1.LeasedMessage, length time.Duration) {
	defer l.wg.Done()
	kctx, unkeep := context.WithCancel(l.hctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		l.keep(kctx, m, length)
	}()
	ran, err := l.handle(m)
	unkeep()
	<-kept // no ExtendLease after the settlement
	if l.hctx.Err() != nil {
		return
	}
	switch {
	case !ran:
		l.nack(m, 0)
	case err == nil:
		l.ack(m)
	default:
		l.nack(m, l.o.nackDelay)
	}
}

// handle runs h on m once a slot is free; ran is false when the loop stopped first.
func (l *handleLoop) handle(m *historyv1.LeasedMessage) (ran bool, err error) {
	select {
	case <-l.stopping:
		return false, nil
	default:
	}
	select {
	case l.slots <- struct{}{}:
	case <-l.stopping:
		return false, nil
	}
	defer func() { <-l.slots }()
	return true, l.h(l.hctx, m)
}

// keep extends m's lease every half length until ctx ends; it stops early when the lease is lost
// or the owner is gone (FAILED_PRECONDITION) or the request is refused (INVALID_ARGUMENT).
func (l *handleLoop) keep(ctx context.Context, m *historyv1.LeasedMessage, length time.Duration) {
	t := time.NewTimer(length / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := l.c.Exchange.ExtendLease(ctx, &historyv1.ExtendLeaseRequest{
			OwnerId: l.owner, Receipt: m.GetReceipt(), VisibilityTimeout: durationpb.New(length),
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.report("ExtendLease", m, err)
			if c := status.Code(err); c == codes.FailedPrecondition || c == codes.InvalidArgument {
				return
			}
		}
		t.Reset(length / 2)
	}
}

func (l *handleLoop) ack(m *historyv1.LeasedMessage) {
	_, err := l.c.Exchange.Ack(l.hctx, &historyv1.AckRequest{OwnerId: l.owner, Receipt: m.GetReceipt()})
	if err != nil && l.hctx.Err() == nil {
		l.report("Ack", m, err)
	}
}

func (l *handleLoop) nack(m *historyv1.LeasedMessage, delay time.Duration) {
	req := &historyv1.NackRequest{OwnerId: l.owner, Receipt: m.GetReceipt()}
	if delay > 0 {
		req.Delay = durationpb.New(delay)
	}
	_, err := l.c.Exchange.Nack(l.hctx, req)
	if err != nil && l.hctx.Err() == nil {
		l.report("Nack", m, err)
	}
}

func (l *handleLoop) report(op string, m *historyv1.LeasedMessage, err error) {
	if l.o.onLeaseError != nil {
		l.o.onLeaseError(&LeaseError{Op: op, Message: m, Err: err})
	}
}

// drain waits for the runs to end, at most the drain; then it cancels the handlers' context
// (stop) and waits handleStopGrace more for those that honour it.
func (l *handleLoop) drain(stop context.CancelFunc) {
	done := make(chan struct{})
	go func() { // ends with the last run, even one that outlives HandleInbox
		l.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(l.o.drain)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	stop()
	t.Reset(handleStopGrace)
	select {
	case <-done:
	case <-t.C:
	}
}
