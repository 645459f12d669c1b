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
// leases again, batch after batch, while the last batch was cut short (LeaseResult.More: by its
// size or its count) and it holds fewer than max_in_flight, and then whenever something may have
// changed:
//   - a delivery to the owner's inboxes (the Exchange's subscription, WakeOnly: its events are
//     only wake-ups, the message itself being taken by the next Lease in Receive's order, so a
//     burst of deliveries that fills its buffer drops wake-ups instead of ending the stream as
//     too slow);
//   - an Ack, Nack or Release of the owner through this server (leaseHub);
//   - the earliest time a hidden message becomes visible (LeaseResult.NextVisible: a lease
//     expiring, a Nack's delay ending), on a timer;
//   - with WithLeaseRecheck (cmd/historyd sets it for --store postgres only), every recheck
//     interval while the stream is held at its max_in_flight, since an Ack on another replica
//     frees room that this server does not hear of. The memory and sqlite engines serve one
//     process, whose every Ack goes through the hub: they need no recheck, which would cost a
//     write transaction each time.
// A Nack without delay on another replica, of a message held there, makes it visible before the
// deadline this stream's timer waits for: the stream takes it at a wake-up of the others, at the
// latest at that deadline.
//
// Leases the stream took but never handed out (a frame over the response budget, found before it
// is sent, and the rest of its batch; the rest of a batch after a failed Send) are given back
// (releaseAll): visible again at once, their attempt undone. A lease whose frame's Send failed may
// have reached the client, so it is left to its deadline, as are the leases sent and not yet
// acknowledged: they are redelivered then with their next attempt (a client that dies with them
// loses nothing).

// Bounds of a leasing stream.
const (
	// defaultMaxInFlight is a leasing stream's max_in_flight when the request gives 0.
	defaultMaxInFlight = 16
	// maxMaxInFlight bounds max_in_flight.
	maxMaxInFlight = 1000
	// maxWakeupDrain bounds the wake-ups dropped before one Lease (they are all answered by it),
	// so that a steady stream of deliveries cannot keep the stream from leasing.
	maxWakeupDrain = 1024
)

// DefaultLeaseRecheck is the recheck interval cmd/historyd gives WithLeaseRecheck when replicas
// may share the Exchange (--store postgres): a Lease that finds no room costs one read of the
// owner, four times a second per stream held at its max_in_flight.
const DefaultLeaseRecheck = 250 * time.Millisecond

// WithLeaseRecheck sets how often a leasing SubscribeInbox held at its max_in_flight leases again
// on its own, to notice room freed by Acks this server does not hear of (another replica's).
// d <= 0, the default, never: right when every Ack of the Exchange goes through this server (the
// memory and sqlite engines). ExchangeService only.
func WithLeaseRecheck(d time.Duration) StreamOption {
	return func(c *streamConfig) { c.leaseRecheck = max(d, 0) }
}

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

// leaseAndSend leases and sends batches while the last one was cut short (LeaseResult.More) and
// the stream holds fewer than its max_in_flight, and returns the last Lease's result.
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
		if err := st.sendLeases(ctx, res.Leases); err != nil {
			return res, err
		}
		// issue 18 review M3: a batch cut by its size is not "nothing more is visible"; More
		// says which. An empty batch ends the loop whatever More says, so that an engine that
		// takes nothing cannot spin it.
		if !res.More || res.Held >= ls.maxInFlight || len(res.Leases) == 0 {
			return res, nil
		}
	}
}

// sendLeases sends one frame per lease, in order. A frame over the response budget ends the
// stream with RESOURCE_EXHAUSTED (RESPONSE_TOO_LARGE, messageId) as a live stream's does; it is
// measured before it is sent, so that lease and the rest were never handed out and are given back
// (the message is visible again, its attempt undone, for Lease or PopMessage with omit_rendered).
// When a Send fails, the client may have its frame: that lease is left to its deadline and only
// the rest are given back.
func (st *inboxStream) sendLeases(ctx context.Context, leases []exchange.Leased) error {
	for i, l := range leases {
		frame := &historyv1.SubscribeInboxResponse{Event: &historyv1.SubscribeInboxResponse_Leased{
			Leased: leasedToProto(l, st.out),
		}}
		if n := proto.Size(frame); n > st.s.maxResponse {
			st.s.releaseAll(ctx, st.owner, leases[i:])
			return &exchangeResponseTooLargeError{size: n, limit: st.s.maxResponse, messageID: l.Message.ID.String(),
				what: "the SubscribeInbox frame of a leased message"}
		}
		if err := st.send(frame); err != nil {
			st.s.releaseAll(ctx, st.owner, leases[i+1:])
			return err
		}
		st.hb.Reset()
	}
	return nil
}

// arm sets timer to the next time the stream must lease on its own: when a hidden message becomes
// visible, or sooner, the recheck interval (when set), while the stream is held at its
// max_in_flight. Stopped when neither applies: only a wake-up can then change what Lease would
// take.
func (st *inboxStream) arm(timer *time.Timer, res exchange.LeaseResult, ls leaseStream) {
	d := time.Duration(-1)
	if !res.NextVisible.IsZero() {
		// At least MinVisibility, so that a clock that disagrees with the engine's cannot spin
		// the loop.
		d = max(res.NextVisible.Sub(st.s.now()), exchange.MinVisibility)
	}
	if recheck := st.s.streams.leaseRecheck; recheck > 0 && res.Held >= ls.maxInFlight && (d < 0 || d > recheck) {
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
