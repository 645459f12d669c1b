//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"

	"google.golang.org/protobuf/proto"
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
	case r < 45:
		return w.send(others, stranger)
	case r < 67:
		return w.collect()
	case r < 85:
		return w.pop(others[w.rng.IntN(len(others))])
	case r < 98:
		return w.receive()
	default:
		return w.unregister()
	}
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

// receive peeks at the worker's inboxes (one page: they are bounded by --exchange-max-inbox).
func (w *exWorker) receive() *exOp {
	in := &historyv1.ReceiveRequest{OwnerId: w.owner, PageSize: 1000, OmitRendered: true}
	return &exOp{
		desc: "Receive " + w.owner,
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			return c.Receive(ctx, in)
		},
		apply: func(resp proto.Message) error {
			return w.log.received(w.owner, resp.(*historyv1.ReceiveResponse).GetMessages())
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
			w.registered = false
			return w.log.unregistered(w.owner, resp.(*historyv1.UnregisterResponse).GetFlow())
		},
		killed: func() { w.log.inFlight(w.log.unseenUnregisters, w.owner) },
	}
}

// register registers the owner again after its unregister.
func (w *exWorker) register() *exOp {
	in := &historyv1.RegisterRequest{OwnerId: w.owner}
	return &exOp{
		desc: "Register " + w.owner,
		call: func(ctx context.Context, c historyv1.ExchangeServiceClient) (proto.Message, error) {
			return c.Register(ctx, in)
		},
		apply: func(proto.Message) error {
			w.registered = true
			return nil
		},
		killed: func() {}, // ListOwners after the restart says whether it registered
	}
}
