//go:build e2e

package e2e

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The Exchange crash harness's leasing receiver (issue 18: "SubscribeInbox can stream leased
// deliveries"): one owner's inboxes are also read by a leasing SubscribeInbox, which competes with
// that owner's worker (its Lease and PopMessage calls) for the same messages. It acknowledges most
// of what it is handed, nacks some and gives up some (the lease expires and the message comes
// back, with its next attempt, to the stream or to the worker). It resubscribes when its owner
// registers again after an Unregister ended the stream, and ends at the kill.

const (
	exStreamMaxInFlight = 4
	exStreamVisibility  = 250 * time.Millisecond
)

// exCrashStreamOwner is the worker whose owner has the leasing receiver.
const exCrashStreamOwner = 0

// receiveLeased runs w's leasing receiver until the kill (stopped is closed then).
func (r *exRun) receiveLeased(ctx context.Context, c historyv1.ExchangeServiceClient, w *exWorker, rng *rand.Rand, killed *atomic.Bool, stopped <-chan struct{}, hold *crashHold) {
	for !killed.Load() {
		err := r.streamLeased(ctx, c, w, rng, killed, hold)
		if killed.Load() || errors.Is(err, errExStreamStop) {
			return
		}
		if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != historyv1.ErrorReason_ERROR_REASON_OWNER_NOT_REGISTERED.String() {
			r.fail("the leasing SubscribeInbox of %s, before the kill: %v", w.owner, err)
			return
		}
		// The owner left (or was not registered when the stream opened): wait until its worker
		// registers it again.
		select {
		case <-w.stream:
		case <-stopped:
			return
		}
	}
}

// streamLeased opens one leasing stream and settles what it hands out, until it ends; it returns
// why it ended (errExStreamStop at the kill or after reporting a failure).
func (r *exRun) streamLeased(ctx context.Context, c historyv1.ExchangeServiceClient, w *exWorker, rng *rand.Rand, killed *atomic.Bool, hold *crashHold) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.SubscribeInbox(sctx, &historyv1.SubscribeInboxRequest{OwnerId: w.owner, Lease: true, OmitRendered: true,
		MaxInFlight: exStreamMaxInFlight, VisibilityTimeout: durationpb.New(exStreamVisibility)})
	if err != nil {
		return err
	}
	where := "the leasing SubscribeInbox of " + w.owner
	for {
		f, err := s.Recv()
		if err != nil {
			return err
		}
		if f.GetMessage() != nil {
			r.fail("%s sent a message frame (%s); a leasing stream sends leased frames", where, f.GetMessage().GetId())
			return errExStreamStop
		}
		l := f.GetLeased()
		if l == nil {
			continue // a heartbeat
		}
		w.log.leased(w.owner, where, []*historyv1.LeasedMessage{l})
		h := exHeld{msg: l.GetMessage().GetId(), sender: l.GetMessage().GetSender().GetStringValue(), receipt: l.GetReceipt(), attempt: int(l.GetAttempt())}
		p := rng.IntN(100)
		if p >= 90 {
			continue // given up: the lease expires
		}
		hold.wait()
		if killed.Load() {
			return errExStreamStop
		}
		if p < 80 {
			_, err = c.Ack(ctx, &historyv1.AckRequest{OwnerId: w.owner, Receipt: h.receipt})
		} else {
			var resp *historyv1.NackResponse
			if resp, err = c.Nack(ctx, &historyv1.NackRequest{OwnerId: w.owner, Receipt: h.receipt}); err == nil {
				w.log.nacked(w.owner, h, resp.GetDeadLettered())
			}
		}
		switch {
		case err == nil:
			if p < 80 {
				w.log.acked(w.owner, h)
			}
		case leaseEnded(err):
			w.log.settledStale()
		case killed.Load():
			if p < 80 {
				w.log.inFlight(w.log.unseenAcks, w.owner)
			}
			return errExStreamStop
		default:
			r.fail("%s: settling message %s, attempt %d: %v", where, h.msg, h.attempt, err)
			return errExStreamStop
		}
	}
}

// errExStreamStop ends the leasing receiver: the kill came, or a failure was reported.
var errExStreamStop = errors.New("the leasing receiver stops")
