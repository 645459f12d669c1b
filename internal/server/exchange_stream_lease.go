package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
)

// A leasing SubscribeInbox (issue 18: "SubscribeInbox can stream leased deliveries, so a receiver
// needs no polling"). The stream leases as Lease does, at most max_in_flight of its scope's
// messages held at once, and sends each lease in a `leased` frame of its own, in lease order. It
// leases again when something may have changed:
//   - a delivery to the owner's inboxes (the Exchange's subscription, whose events it uses only as
//     wake-ups: the message itself is taken by the next Lease, in Receive's order);
//   - an Ack or Nack of the owner through this server (leaseHub);
//   - the earliest time a hidden message becomes visible (LeaseResult.NextVisible: a lease
//     expiring, a Nack's delay ending), on a timer;
//   - every defaultLeaseRecheck (250 ms) while the stream is held at its max_in_flight, since an Ack on another
//     replica frees room that this server does not hear of.
// A Nack without delay on another replica, of a message held there, makes it visible before the
// deadline this stream's timer waits for: the stream takes it at a wake-up of the others, at the
// latest at that deadline.
//
// Leases the stream took but could not send (the stream ending as it sent a batch, a frame over
// the response budget) are Nack'ed at once so they are visible again; leases sent and not yet
// acknowledged stay held until their deadline, when they are redelivered with their next attempt
// (a client that dies with them loses nothing).

// Bounds of a leasing stream.
const (
	// defaultMaxInFlight is a leasing stream's max_in_flight when the request gives 0.
	defaultMaxInFlight = 16
	// maxMaxInFlight bounds max_in_flight.
	maxMaxInFlight = 1000
	// defaultLeaseRecheck is how often a leasing stream held at its max_in_flight leases again on
	// its own, for Acks on other replicas: a Lease that finds no room costs one read of the owner.
	defaultLeaseRecheck = 250 * time.Millisecond
	// maxWakeupDrain bounds the wake-ups dropped before one Lease (they are all answered by it),
	// so that a steady stream of deliveries cannot keep the stream from leasing.
	maxWakeupDrain = 1024
)

// leaseStream is what a leasing SubscribeInbox asked for.
type leaseStream struct {
	maxInFlight int
	visibility  time.Duration // 0: the owner's
}

// leaseStreamFromProto reads SubscribeInbox's lease options; they are checked whether or not
// lease is set, so that a malformed request is never half-accepted.
func leaseStreamFromProto(req *historyv1.SubscribeInboxRequest) (leaseStream, error) {
	n, err := boundedCount("max_in_flight", req.GetMaxInFlight(), defaultMaxInFlight, maxMaxInFlight)
	if err != nil {
		return leaseStream{}, err
	}
	vis, err := leaseDuration("visibility_timeout", req.GetVisibilityTimeout(), false)
	if err != nil {
		return leaseStream{}, err
	}
	return leaseStream{maxInFlight: n, visibility: vis}, nil
}

// leaseLoop leases and sends until the stream ends, then waits for a wake-up. It has no goroutine
// of its own: the hub's channel, the timer and the subscription are all read here, and released
// by the defers when it returns.
func (st *inboxStream) leaseLoop(ctx context.Context, ls leaseStream) error {
	woken, leave := st.s.hub.join(st.owner)
	defer leave()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		res, err := st.leaseAndSend(ctx, ls, woken)
		if err != nil {
			return err
		}
		st.arm(timer, res, ls)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-st.s.stopping:
				return errShuttingDown
			case <-st.sub.Done():
				return st.s.inboxStreamEnd(st.sub, st.left)
			case <-st.sub.Events():
				waiting = false
			case <-woken:
				waiting = false
			case <-timer.C:
				waiting = false
			case <-st.hb.C():
				if err := st.beat(); err != nil {
					return err
				}
			}
		}
	}
}

// leaseAndSend leases and sends batches until one comes back short (nothing more is visible) or
// the stream holds its max_in_flight, and returns the last Lease's result.
func (st *inboxStream) leaseAndSend(ctx context.Context, ls leaseStream, woken <-chan struct{}) (exchange.LeaseResult, error) {
	batch := min(ls.maxInFlight, exchange.MaxLeaseBatch)
	for {
		// The Lease below answers every wake-up that came before it.
		st.dropWakeups(woken)
		res, err := st.s.ex.Lease(ctx, exchange.LeaseRequest{
			Owner: st.owner, Sender: st.sender, Max: batch, MaxHeld: ls.maxInFlight, Visibility: ls.visibility,
			// One batch's frames together about one response: the messages are held in memory
			// until sent.
			MaxBytes: int64(st.s.maxResponse),
		})
		if err != nil {
			return res, err
		}
		for i, l := range res.Leases {
			if err := st.sendLeased(l); err != nil {
				st.s.nackAll(ctx, st.owner, res.Leases[i:])
				return res, err
			}
		}
		if len(res.Leases) < batch || res.Held >= ls.maxInFlight {
			return res, nil
		}
	}
}

// sendLeased sends one lease's frame. A frame over the response budget ends the stream with
// RESOURCE_EXHAUSTED (RESPONSE_TOO_LARGE, messageId) as a live stream's does; the caller Nacks the
// lease, so the message is visible again for Lease or PopMessage with omit_rendered.
func (st *inboxStream) sendLeased(l exchange.Leased) error {
	frame := &historyv1.SubscribeInboxResponse{Event: &historyv1.SubscribeInboxResponse_Leased{
		Leased: leasedToProto(l, st.out),
	}}
	if n := proto.Size(frame); n > st.s.maxResponse {
		return &exchangeResponseTooLargeError{size: n, limit: st.s.maxResponse, messageID: l.Message.ID.String(),
			what: "the SubscribeInbox frame of a leased message"}
	}
	if err := st.send(frame); err != nil {
		return err
	}
	st.hb.Reset()
	return nil
}

// arm sets timer to the next time the stream must lease on its own: when a hidden message becomes
// visible, or sooner, the recheck interval, while the stream is held at its max_in_flight. Stopped when
// neither applies: only a wake-up can then change what Lease would take.
func (st *inboxStream) arm(timer *time.Timer, res exchange.LeaseResult, ls leaseStream) {
	d := time.Duration(-1)
	if !res.NextVisible.IsZero() {
		// At least MinVisibility, so that a clock that disagrees with the engine's cannot spin
		// the loop.
		d = max(res.NextVisible.Sub(st.s.now()), exchange.MinVisibility)
	}
	if recheck := st.s.leaseRecheck; res.Held >= ls.maxInFlight && (d < 0 || d > recheck) {
		d = recheck
	}
	timer.Stop()
	if d >= 0 {
		timer.Reset(d)
	}
}

// dropWakeups empties the subscription's events and the hub's signal, at most maxWakeupDrain.
func (st *inboxStream) dropWakeups(woken <-chan struct{}) {
	for range maxWakeupDrain {
		select {
		case <-st.sub.Events():
		case <-woken:
		default:
			return
		}
	}
}
