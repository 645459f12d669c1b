//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The Exchange crash harness's traffic (crash_exchange_test.go). Each worker is one owner: it alone
// sends as that owner, collects its outbox, receives and pops its inboxes, unregisters and
// registers it again, one request at a time. So at a kill each owner has at most one call in
// flight, and what the clients saw of each owner is exact: the sends it acknowledged (Collect
// routes only messages whose Send was acknowledged, since the same worker sends and collects),
// the deliveries its collects reported, the messages its pops handed out, what its unregisters
// returned.

// exOp is one call of a worker. call sends it (again, for a Send retried after a kill, with the
// same request id and payload); apply records its response in the clients' log (under the log's
// lock) or says how the response contradicts the log; killed records that its answer was lost.
type exOp struct {
	desc   string
	call   func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error)
	apply  func(resp proto.Message) error
	killed func() // nil: nothing to record (Receive); Send ops are retried instead
	send   bool   // retried with its request id after the restart
}

// exWorker is one owner's client.
type exWorker struct {
	id         int
	owner      string
	n          int // tokens issued
	rng        *rand.Rand
	log        *exLog
	registered bool // as last acknowledged (or read with ListOwners after a restart)
	// held are the receipts of the worker's Lease responses not yet acknowledged, nacked or given
	// up, oldest first: kept across kills (the client outlives the server), so that some are
	// acknowledged after a restart, and across Unregister, so that some are tried after it.
	held []exHeld
	// stream, for the owner with a leasing receiver, is signalled when the owner registers
	// again: the receiver resubscribes (crash_exchange_stream_test.go).
	stream chan struct{}
}

// exHeld is a lease a client holds: the message, its sender, the receipt and its attempt.
type exHeld struct {
	msg, sender, receipt string
	attempt              int
}

// The owners' lease settings in the harness (issue 18): a message leased exCrashMaxAttempts times
// without an Ack becomes a dead letter, reason max attempts; leases last exCrashVisibility unless
// a Lease asks for another length: about a cycle, so that leases given up expire within the next
// cycles, and some across a kill.
const (
	exCrashMaxAttempts = 3
	exCrashVisibility  = 300 * time.Millisecond
	exCrashMaxHeld     = 6 // receipts a worker holds; past it, the oldest is given up (left to expire)
)

// registerRequest registers owner with the harness's lease settings.
func registerRequest(owner string) *historyv1.RegisterRequest {
	return &historyv1.RegisterRequest{OwnerId: owner, MaxAttempts: exCrashMaxAttempts, VisibilityTimeout: durationpb.New(exCrashVisibility)}
}

// token returns a request id no other Send of the run uses.
func (w *exWorker) token() string {
	w.n++
	return fmt.Sprintf("x%d-%d", w.id, w.n)
}

// next plans the worker's next call; others are the other owners, stranger a UUID never
// registered.
func (w *exWorker) next(others []string, stranger string) *exOp {
	if !w.registered {
		return w.register()
	}
	switch r := w.rng.IntN(100); {
	case r < 42:
		return w.send(others, stranger)
	case r < 62:
		return w.collect()
	case r < 72:
		return w.pop(others[w.rng.IntN(len(others))])
	case r < 81:
		return w.lease(others[w.rng.IntN(len(others))])
	case r < 90 && len(w.held) > 0:
		return w.settle()
	case r < 98:
		return w.receive()
	default:
		return w.unregister()
	}
}

// lease leases up to 3 messages of the worker's owner, from all its inboxes or from one sender's,
// for the owner's visibility timeout or a drawn one.
func (w *exWorker) lease(sender string) *exOp {
	in := &historyv1.LeaseRequest{OwnerId: w.owner, MaxMessages: int32(1 + w.rng.IntN(3)), OmitRendered: true}
	if w.rng.IntN(2) == 0 {
		in.Sender = &sender
	}
	if w.rng.IntN(3) == 0 {
		in.VisibilityTimeout = durationpb.New(time.Duration(100+w.rng.IntN(900)) * time.Millisecond)
	}
	return &exOp{
		desc: "Lease " + w.owner,
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			return c.Lease(ctx, in)
		},
		apply: func(resp proto.Message) error {
			ls := resp.(*historyv1.LeaseResponse).GetLeased()
			if len(ls) > int(in.GetMaxMessages()) {
				return fmt.Errorf("Lease %s of at most %d messages handed out %d", w.owner, in.GetMaxMessages(), len(ls))
			}
			w.log.leased(w.owner, "Lease "+w.owner, ls)
			for _, l := range ls {
				if in.Sender != nil && l.GetMessage().GetSender().GetStringValue() != sender {
					return fmt.Errorf("Lease %s of %s's inbox handed out message %s of %s", w.owner, sender, l.GetMessage().GetId(), l.GetMessage().GetSender().GetStringValue())
				}
				w.held = append(w.held, exHeld{msg: l.GetMessage().GetId(), sender: l.GetMessage().GetSender().GetStringValue(), receipt: l.GetReceipt(), attempt: int(l.GetAttempt())})
			}
			if n := len(w.held) - exCrashMaxHeld; n > 0 {
				w.held = w.held[n:] // given up: the leases expire, the messages come back
			}
			return nil
		},
		killed: func() {}, // a lease no client saw expires; only its attempt shows
	}
}

// settle ends the worker's oldest held lease: an Ack mostly, else a Nack (at once or after a
// delay) or an ExtendLease (kept). Each may find the lease stale (it expired and the message was
// taken since, or it was returned by an Unregister): FAILED_PRECONDITION, nothing changed.
func (w *exWorker) settle() *exOp {
	h := w.held[0]
	w.held = w.held[1:]
	switch r := w.rng.IntN(100); {
	case r < 70:
		return &exOp{
			desc: fmt.Sprintf("Ack %s of message %s, attempt %d", w.owner, h.msg, h.attempt),
			call: settleCall(func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
				return c.Ack(ctx, &historyv1.AckRequest{OwnerId: w.owner, Receipt: h.receipt})
			}),
			apply: func(resp proto.Message) error {
				if resp == nil {
					w.log.settledStale()
					return nil
				}
				w.log.acked(w.owner, h)
				return nil
			},
			killed: func() { w.log.inFlight(w.log.unseenAcks, w.owner) },
		}
	case r < 90:
		var delay *durationpb.Duration
		if w.rng.IntN(2) == 0 {
			delay = durationpb.New(time.Duration(50+w.rng.IntN(250)) * time.Millisecond)
		}
		return &exOp{
			desc: fmt.Sprintf("Nack %s of message %s, attempt %d", w.owner, h.msg, h.attempt),
			call: settleCall(func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
				return c.Nack(ctx, &historyv1.NackRequest{OwnerId: w.owner, Receipt: h.receipt, Delay: delay})
			}),
			apply: func(resp proto.Message) error {
				if resp == nil {
					w.log.settledStale()
					return nil
				}
				w.log.nacked(w.owner, h, resp.(*historyv1.NackResponse).GetDeadLettered())
				return nil
			},
			killed: func() {}, // a Nack no client saw: the message visible again, or a dead letter at max attempts
		}
	default:
		return &exOp{
			desc: fmt.Sprintf("ExtendLease %s of message %s, attempt %d", w.owner, h.msg, h.attempt),
			call: settleCall(func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
				return c.ExtendLease(ctx, &historyv1.ExtendLeaseRequest{OwnerId: w.owner, Receipt: h.receipt, VisibilityTimeout: durationpb.New(exCrashVisibility)})
			}),
			apply: func(resp proto.Message) error {
				if resp == nil {
					w.log.settledStale()
					return nil
				}
				w.log.extended()
				w.held = append(w.held, h) // still held: settled later
				return nil
			},
			killed: func() {},
		}
	}
}

// settleCall wraps an Ack, Nack or ExtendLease: a refusal because the lease is stale, or because
// the owner is not registered (an Unregister ended the lease), is an answer (nil), not an error.
func settleCall(call func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error)) func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
	return func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
		resp, err := call(ctx, c)
		if leaseEnded(err) {
			return nil, nil
		}
		return resp, err
	}
}

// leaseEnded reports whether err refuses a receipt because its lease is no longer held:
// FAILED_PRECONDITION with reason LEASE_STALE or OWNER_NOT_REGISTERED.
func leaseEnded(err error) bool {
	if status.Code(err) != codes.FailedPrecondition {
		return false
	}
	r := reasonOf(err)
	return r == historyv1.ErrorReason_ERROR_REASON_LEASE_STALE.String() || r == historyv1.ErrorReason_ERROR_REASON_OWNER_NOT_REGISTERED.String()
}

// send queues a message: mostly to another owner, some broadcasts (a null recipient reaches every
// other registered owner), some to a UUID no one registers and some with no recipient (both dead
// letters at the collect).
func (w *exWorker) send(others []string, stranger string) *exOp {
	tok := w.token()
	var to *structpb.Value
	switch r := w.rng.IntN(100); {
	case r < 75:
		to = client.Participant(others[w.rng.IntN(len(others))])
	case r < 87:
		to = client.Broadcast()
	case r < 95:
		to = client.Participant(stranger)
	default: // absent: UNSET
	}
	content := fmt.Sprintf(`{"token": %q}`, tok)
	in := &historyv1.SendRequest{Sender: w.owner, Recipient: to, ContentJson: &content, RequestId: tok}
	return &exOp{
		desc: fmt.Sprintf("Send %s from %s", tok, w.owner),
		send: true,
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			return c.Send(ctx, in)
		},
		apply: func(resp proto.Message) error {
			m := resp.(*historyv1.SendResponse).GetMessage()
			return w.log.sent(w.owner, tok, m.GetId(), m.GetSender().GetStringValue())
		},
	}
}

// collect routes the worker's outbox, with the reached owners' ids in the report.
func (w *exWorker) collect() *exOp {
	in := &historyv1.CollectRequest{OwnerId: w.owner, IncludeReachedOwnerIds: true}
	return &exOp{
		desc: "Collect " + w.owner,
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			return c.Collect(ctx, in)
		},
		apply: func(resp proto.Message) error {
			return w.log.collected(w.owner, resp.(*historyv1.CollectResponse))
		},
		killed: func() { w.log.inFlight(w.log.unseenCollects, w.owner) },
	}
}

// pop takes the oldest message of sender's inbox at the worker's owner.
func (w *exWorker) pop(sender string) *exOp {
	in := &historyv1.PopMessageRequest{OwnerId: w.owner, Sender: sender, OmitRendered: true}
	return &exOp{
		desc: fmt.Sprintf("PopMessage %s from %s's inbox", w.owner, sender),
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			return c.PopMessage(ctx, in)
		},
		apply: func(resp proto.Message) error {
			m := resp.(*historyv1.PopMessageResponse).GetMessage()
			if m == nil {
				return nil
			}
			return w.log.popped(w.owner, sender, m)
		},
		killed: func() { w.log.inFlight(w.log.unseenPops, w.owner) },
	}
}

// receive peeks at the worker's inboxes (one page: they are bounded by --exchange-max-inbox); the
// leases granted before it must show in its lease states.
func (w *exWorker) receive() *exOp {
	in := &historyv1.ReceiveRequest{OwnerId: w.owner, PageSize: 1000, OmitRendered: true}
	var before exLeaseSnapshot
	return &exOp{
		desc: "Receive " + w.owner,
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			before = w.log.leaseSnapshot(w.owner)
			return c.Receive(ctx, in)
		},
		apply: func(resp proto.Message) error {
			return w.log.received(w.owner, resp.(*historyv1.ReceiveResponse), before)
		},
	}
}

// unregister removes the owner; everything it held comes back in the response.
func (w *exWorker) unregister() *exOp {
	in := &historyv1.UnregisterRequest{OwnerId: w.owner, OmitRendered: true}
	return &exOp{
		desc: "Unregister " + w.owner,
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			return c.Unregister(ctx, in)
		},
		apply: func(resp proto.Message) error {
			w.setRegistered(false)
			return w.log.unregistered(w.owner, resp.(*historyv1.UnregisterResponse).GetFlow())
		},
		killed: func() { w.log.inFlight(w.log.unseenUnregisters, w.owner) },
	}
}

// register registers the owner again after its unregister, with the harness's lease settings.
func (w *exWorker) register() *exOp {
	in := registerRequest(w.owner)
	return &exOp{
		desc: "Register " + w.owner,
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			return c.Register(ctx, in)
		},
		apply: func(proto.Message) error {
			w.setRegistered(true)
			return nil
		},
		killed: func() {}, // ListOwners after the restart says whether it registered
	}
}

// setRegistered records whether the owner is registered; registering wakes its leasing receiver,
// if it has one.
func (w *exWorker) setRegistered(r bool) {
	w.registered = r
	if r && w.stream != nil {
		select {
		case w.stream <- struct{}{}:
		default: // already signalled
		}
	}
}
