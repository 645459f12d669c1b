//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The crash harness's writes (crash_test.go). A writer owns its branches: it alone writes them, one
// request at a time, so at a kill it has at most one write in flight and its branches' acknowledged
// state is exact. The one shared branch takes every writer's appends concurrently, so that a group
// commit holds several writes of one branch. Every write carries a request id, and a branch-making
// write a name, both the writer's next token.

// crashOp is one write: call sends it (again, on a retry, with the same request id), apply records
// its acknowledgement in the model (under the model's lock) or says how the response contradicts it.
type crashOp struct {
	desc  string
	call  func(ctx context.Context, c historyv1.HistoryServiceClient) (proto.Message, error)
	apply func(resp proto.Message) error
	// branch is the branch an AddMessage (add) appends to, or a DeleteBranch deletes; nil for the
	// other writes. resend tells the two apart: an AddMessage may be sent again.
	branch *mBranch
	resend bool
}

// Bounds that keep each cycle's check small: a branch this long is deleted, a writer keeps at most
// this many writable branches and forks, and the shared branch is replaced once this long.
const (
	crashMaxMessages = 40
	crashMaxOwn      = 3
	crashMaxForks    = 2
	crashMaxShared   = 80
)

// crashWriter plans one writer's writes.
type crashWriter struct {
	id  int
	n   int // tokens issued: the next one is unique across cycles
	rng *rand.Rand
	m   *crashModel
}

// token returns a request id (and name, and instruction text) no other write uses.
func (w *crashWriter) token() string {
	w.n++
	return fmt.Sprintf("w%d-%d", w.id, w.n)
}

// next plans the writer's next write from the acknowledged state; shared is the shared branch. The
// caller holds the model's lock.
func (w *crashWriter) next(shared *mBranch) *crashOp {
	var own, forks []*mBranch
	for _, b := range w.m.branches {
		if b.owner == w.id && b.live() {
			if b.fork {
				forks = append(forks, b)
			} else {
				own = append(own, b)
			}
		}
	}
	sortBranches(own)
	sortBranches(forks)
	if len(own) == 0 {
		if w.rng.IntN(2) == 0 {
			return w.create()
		}
		return w.importBranch()
	}
	for _, b := range own {
		if len(b.msgs) >= crashMaxMessages {
			return w.delete(b)
		}
	}
	if len(forks) > crashMaxForks {
		return w.delete(forks[w.rng.IntN(len(forks))])
	}
	b := own[w.rng.IntN(len(own))]
	switch r := w.rng.IntN(100); {
	case r < 30:
	case r < 45 && shared != nil && shared.live():
		return w.add(shared, false)
	case r < 55:
		return w.add(b, true)
	case r < 68:
		if req := w.unanswered(b); req != nil {
			return w.answer(b, req)
		}
	case r < 74 && len(b.msgs) > 0:
		return w.setProgression(b)
	case r < 82 && len(b.msgs) > 0:
		return w.fork(b)
	case r < 88 && len(own) < crashMaxOwn:
		return w.importBranch()
	case r < 92 && len(own) < crashMaxOwn:
		return w.create()
	case r < 96 && len(forks) > 0:
		return w.delete(forks[w.rng.IntN(len(forks))])
	case r < 100 && len(own) > 1:
		return w.delete(b)
	}
	return w.add(b, false)
}

// unanswered returns a random ActionRequest of b whose response is not acknowledged, or nil.
func (w *crashWriter) unanswered(b *mBranch) *mMsg {
	msgs := b.list()
	var open []*mMsg
	for _, msg := range msgs {
		if msg.action && !msg.answered {
			open = append(open, msg)
		}
	}
	if len(open) == 0 {
		return nil
	}
	return open[w.rng.IntN(len(open))]
}

// ackLocked counts an acknowledged write and applies it under the model's lock.
func (w *crashWriter) ackLocked(f func() error) error {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	w.m.acked++
	return f()
}

// add appends an Instruction (or an ActionRequest) to b.
func (w *crashWriter) add(b *mBranch, action bool) *crashOp {
	tok := w.token()
	req := instruction(b.id, tok, tok)
	if action {
		req.Input = &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{
			Function: "f", ArgumentsJson: fmt.Sprintf(`{"token": %q}`, tok),
		}}
	}
	return &crashOp{
		branch: b, resend: true,
		desc: fmt.Sprintf("AddMessage %s to %s", tok, b.name),
		call: func(ctx context.Context, c historyv1.HistoryServiceClient) (proto.Message, error) {
			return c.AddMessage(ctx, req)
		},
		apply: func(resp proto.Message) error {
			r := resp.(*historyv1.AddMessageResponse)
			return w.ackLocked(func() error {
				if prev, ok := b.msgs[r.GetIndex()]; ok {
					return fmt.Errorf("acknowledged at index %d of %s, which acknowledged message %s holds", r.GetIndex(), b.name, prev.id)
				}
				text := ""
				if !action {
					text = tok
				}
				msg := &mMsg{id: r.GetMessage().GetId(), seq: r.GetMessage().GetSequence(), text: text, action: action}
				b.put(r.GetIndex(), msg, historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED)
				return nil
			})
		},
	}
}

// answer is CreateActionResponse for req, an ActionRequest of b: two events committed together.
func (w *crashWriter) answer(b *mBranch, req *mMsg) *crashOp {
	tok := w.token()
	in := &historyv1.CreateActionResponseRequest{BranchId: b.id, RequestId: tok, ActionRequestId: req.id, OutputJson: proto.String(fmt.Sprintf("%q", tok))}
	index := uint64(len(b.msgs)) // b is this writer's alone: the response is appended
	return &crashOp{
		desc: fmt.Sprintf("CreateActionResponse %s for %s in %s", tok, req.id, b.name),
		call: func(ctx context.Context, c historyv1.HistoryServiceClient) (proto.Message, error) {
			return c.CreateActionResponse(ctx, in)
		},
		apply: func(resp proto.Message) error {
			r := resp.(*historyv1.CreateActionResponseResponse)
			return w.ackLocked(func() error {
				if r.GetActionRequest().GetId() != req.id {
					return fmt.Errorf("the response names request %s, want %s", r.GetActionRequest().GetId(), req.id)
				}
				req.seq, req.answered = r.GetActionRequest().GetSequence(), true
				b.events[req.seq] = mEvent{kind: historyv1.EventKind_EVENT_KIND_MESSAGE_REPLACED, msg: req.id}
				b.put(index, &mMsg{id: r.GetActionResponse().GetId(), seq: r.GetActionResponse().GetSequence()}, historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED)
				return nil
			})
		},
	}
}

// setProgression selects a random subset of b's messages, in a random order.
func (w *crashWriter) setProgression(b *mBranch) *crashOp {
	tok := w.token()
	msgs := b.list()
	var ids []string
	for _, i := range w.rng.Perm(len(msgs))[:1+w.rng.IntN(len(msgs))] {
		ids = append(ids, msgs[i].id)
	}
	in := &historyv1.SetProgressionRequest{BranchId: b.id, RequestId: tok, Progression: &historyv1.MessageIds{Ids: ids}}
	return &crashOp{
		desc: fmt.Sprintf("SetProgression %s on %s", tok, b.name),
		call: func(ctx context.Context, c historyv1.HistoryServiceClient) (proto.Message, error) {
			return c.SetProgression(ctx, in)
		},
		apply: func(resp proto.Message) error {
			r := resp.(*historyv1.SetProgressionResponse)
			return w.ackLocked(func() error {
				b.progression, b.hasProgression = ids, true
				b.events[r.GetHeadSequence()] = mEvent{kind: historyv1.EventKind_EVENT_KIND_PROGRESSION_SET}
				return nil
			})
		},
	}
}

// fork forks b at a random message: the fork holds clones of b's messages up to it, or is absent.
func (w *crashWriter) fork(b *mBranch) *crashOp {
	tok := w.token()
	msgs := b.list()
	at := w.rng.IntN(len(msgs))
	nb := &mBranch{name: tok, owner: w.id, fork: true}
	w.m.add(nb)
	in := &historyv1.ForkBranchRequest{RequestId: tok, BranchId: b.id, MessageId: msgs[at].id, Name: proto.String(tok)}
	var prefix []string
	for _, msg := range msgs[:at+1] {
		prefix = append(prefix, msg.id)
	}
	return &crashOp{
		desc: fmt.Sprintf("ForkBranch %s of %s at %d", tok, b.name, at),
		call: func(ctx context.Context, c historyv1.HistoryServiceClient) (proto.Message, error) {
			return c.ForkBranch(ctx, in)
		},
		apply: func(resp proto.Message) error {
			r := resp.(*historyv1.ForkBranchResponse)
			return w.ackLocked(func() error {
				nb.created(r.GetBranch())
				for i, id := range prefix {
					nb.msgs[uint64(i)] = &mMsg{cloneFrom: id, seq: 1}
				}
				return nil
			})
		},
	}
}

// importBranch imports a Branch.to_dict of 1 to 5 Instructions with ids the writer chooses, under
// a server-made branch id (so that a second import would be a second branch of the same name).
func (w *crashWriter) importBranch() *crashOp {
	tok := w.token()
	type dict = map[string]any
	var msgs []dict
	var ids []string
	for i := range 1 + w.rng.IntN(5) {
		id := uuidFrom(w.rng)
		ids = append(ids, id)
		msgs = append(msgs, dict{"id": id, "content": dict{"instruction": fmt.Sprintf("%s/%d", tok, i)}, "metadata": dict{"lion_class": "Instruction"}})
	}
	data, err := json.Marshal(dict{"name": tok, "messages": msgs})
	if err != nil {
		panic(err) // maps of strings always encode
	}
	nb := &mBranch{name: tok, owner: w.id}
	w.m.add(nb)
	in := &historyv1.ImportBranchRequest{RequestId: tok, Data: string(data), NewBranchId: true}
	return &crashOp{
		desc: fmt.Sprintf("ImportBranch %s (%d messages)", tok, len(ids)),
		call: func(ctx context.Context, c historyv1.HistoryServiceClient) (proto.Message, error) {
			return c.ImportBranch(ctx, in)
		},
		apply: func(resp proto.Message) error {
			r := resp.(*historyv1.ImportBranchResponse)
			return w.ackLocked(func() error {
				nb.created(r.GetBranch())
				for i, id := range ids {
					nb.msgs[uint64(i)] = &mMsg{id: id, seq: 1, text: fmt.Sprintf("%s/%d", tok, i)}
				}
				return nil
			})
		},
	}
}

// createFor creates an empty branch owned by owner (the writer's, or sharedOwner).
func (w *crashWriter) createFor(owner int) (*crashOp, *mBranch) {
	tok := w.token()
	nb := &mBranch{name: tok, owner: owner}
	w.m.add(nb)
	in := &historyv1.CreateBranchRequest{RequestId: tok, Name: proto.String(tok)}
	op := &crashOp{
		desc: "CreateBranch " + tok,
		call: func(ctx context.Context, c historyv1.HistoryServiceClient) (proto.Message, error) {
			return c.CreateBranch(ctx, in)
		},
		apply: func(resp proto.Message) error {
			r := resp.(*historyv1.CreateBranchResponse)
			return w.ackLocked(func() error {
				nb.created(r.GetBranch())
				return nil
			})
		},
	}
	return op, nb
}

func (w *crashWriter) create() *crashOp {
	op, _ := w.createFor(w.id)
	return op
}

// delete deletes b.
func (w *crashWriter) delete(b *mBranch) *crashOp {
	tok := w.token()
	in := &historyv1.DeleteBranchRequest{BranchId: b.id, RequestId: tok}
	return &crashOp{
		branch: b,
		desc:   fmt.Sprintf("DeleteBranch %s (%s)", b.name, tok),
		call: func(ctx context.Context, c historyv1.HistoryServiceClient) (proto.Message, error) {
			return c.DeleteBranch(ctx, in)
		},
		apply: func(proto.Message) error {
			return w.ackLocked(func() error {
				b.deleted = true
				return nil
			})
		},
	}
}

// uuidFrom draws a random (version 4) UUID from rng, so that a seed replays the same ids.
func uuidFrom(rng *rand.Rand) string {
	var u uuid.UUID
	for i := range u {
		u[i] = byte(rng.Uint32())
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}
