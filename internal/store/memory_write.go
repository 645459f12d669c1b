package store

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// mutation is the body of a branch write, run under the branch lock after
// the idempotency and head checks.
type mutation func(b *branch) (written, error)

// written is what a mutation did: its result, the versions of the messages
// the result carries (a remembered response holds them), and the message
// the observers are told about (nil for writes that fire none).
type written struct {
	res      WriteResult
	versions []*version
	added    *envelope.Message
}

// write runs one branch mutation: under the branch lock the repeat check
// (first, DESIGN.md "Branches"), the head check, then fn; a success is
// remembered under its request id. The observers run after the lock is
// released (ADR-0006 D4).
func (m *Memory) write(ctx context.Context, branchID uuid.UUID, op Op, opts WriteOptions, fn mutation) (WriteResult, error) {
	b, err := m.writeLocked(branchID)
	if err != nil {
		return WriteResult{}, err
	}
	res, snapshot, added, err := m.commit(b, op, opts, fn)
	if err != nil || len(snapshot) == 0 {
		return res, err
	}
	return res, notify(ctx, branchID, snapshot, added)
}

// commit is write's locked part. It releases the branch lock, which the
// caller took, on every path, a panic in fn included; it returns the
// observers to tell about added.
func (m *Memory) commit(b *branch, op Op, opts WriteOptions, fn mutation) (WriteResult, []observerEntry, *envelope.Message, error) {
	defer b.mu.Unlock()
	now := m.opts.now()
	scope := branchScope(b)
	if r, ok, err := m.requests.get(now, scope, op, opts.RequestID); err != nil || ok {
		if err != nil {
			return WriteResult{}, nil, nil, err
		}
		res := r.(WriteResult)
		res.Replayed = true
		return res, nil, nil, nil
	}
	if err := b.checkHead(opts); err != nil {
		return WriteResult{}, nil, nil, err
	}
	// The record is charged before the write: one that does not fit
	// refuses the write, never an id remembered elsewhere (ADR-0010).
	charge, err := m.requests.reserve(scope, opts.RequestID, 0)
	if err != nil {
		return WriteResult{}, nil, nil, err
	}
	w, err := fn(b)
	if err != nil {
		m.requests.release(charge)
		return WriteResult{}, nil, nil, err
	}
	m.requests.put(now, scope, op, opts.RequestID, response{result: w.res, versions: w.versions}, charge)
	if w.added == nil {
		return w.res, nil, nil, nil
	}
	return w.res, b.snapshotObservers(), w.added, nil
}

// commitMessages reserves the bytes of the planned placements, applies them
// as one commit with consecutive sequences, and returns their versions.
func (m *Memory) commitMessages(b *branch, ps []placement) ([]*version, error) {
	sizes := make([]int64, len(ps))
	var total int64
	for i, p := range ps {
		sizes[i] = messageSize(p.msg)
		total += sizes[i]
	}
	if err := m.budget.reserve(total); err != nil {
		return nil, err
	}
	versions := make([]*version, len(ps))
	entries := make([]logEntry, len(ps))
	for i, p := range ps {
		seq := b.head + 1 + uint64(i)
		kind := p.kind()
		v := m.apply(b, p, seq, sizes[i])
		versions[i] = v
		entries[i] = logEntry{ev: Event{Sequence: seq, Kind: kind, Message: p.msg, Index: b.index(v)}, versions: []*version{v}}
	}
	m.record(b, entries)
	return versions, nil
}

// recordEvent records an event that writes no message; its size is
// already charged.
func (m *Memory) recordEvent(b *branch, ev Event, size int64) {
	ev.Sequence = b.head + 1
	ev.Index = -1
	m.record(b, []logEntry{{ev: ev, size: size}})
}

// SetSystem is set_system (Store.SetSystem).
func (m *Memory) SetSystem(ctx context.Context, branchID uuid.UUID, system *envelope.Message, opts WriteOptions) (WriteResult, error) {
	return m.write(ctx, branchID, OpSetSystem, opts, func(b *branch) (written, error) {
		if system == nil || system.Kind() != envelope.KindSystem {
			return written{}, fieldErr("system", ErrNotSystem, "%s", NotSystemMessage)
		}
		p, err := b.plan(system, "system")
		if err != nil {
			return written{}, err
		}
		vs, err := m.commitMessages(b, []placement{p})
		if err != nil {
			return written{}, err
		}
		return written{res: WriteResult{Message: vs[0].stored(), Index: 0, Head: b.head}, versions: vs}, nil
	})
}

// AddMessage is add_message (Store.AddMessage).
func (m *Memory) AddMessage(ctx context.Context, branchID uuid.UUID, in AddInput, opts WriteOptions) (WriteResult, error) {
	return m.write(ctx, branchID, OpAddMessage, opts, func(b *branch) (written, error) {
		created, err := b.build(in)
		if err != nil {
			return written{}, err
		}
		field := ""
		if in.Message != nil {
			field = "message"
		}
		return m.commitCreated(b, created, field)
	})
}

// build runs the factory with the named branch messages resolved, or takes
// the pre-built message. A target keeps its kind: an input of another kind
// is ErrKindChange naming target_id (DESIGN.md "Branches").
func (b *branch) build(in AddInput) (Created, error) {
	if in.Message != nil {
		if in.Target != nil || in.ActionRequest != nil || !in.Factory.empty() {
			return Created{}, ErrOneMessageType
		}
		return Created{Message: in.Message}, nil
	}
	f := &in.Factory // in is this call's copy: the factory may be completed in place
	if in.Target != nil {
		v, ok := b.get(*in.Target)
		if !ok {
			return Created{}, &MessageError{Err: ErrMessageNotFound, BranchID: b.id, MessageID: *in.Target, Field: "target_id"}
		}
		kindChange := func(detail string) error {
			return &MessageError{Err: ErrKindChange, BranchID: b.id, MessageID: *in.Target, Field: "target_id",
				Detail: "the target is " + article(v.msg.Kind()) + ", " + detail}
		}
		switch v.msg.Kind() {
		case envelope.KindSystem:
			f.SystemMsg = v.msg
		case envelope.KindInstruction:
			f.InstructionMsg = v.msg
		case envelope.KindAssistantResponse:
			f.AssistantMsg = v.msg
		case envelope.KindActionRequest:
			f.ActionRequestMsg = v.msg
		case envelope.KindActionResponse:
			f.ActionResponseMsg = v.msg
		default:
			return Created{}, kindChange("which no input updates")
		}
		switch {
		case f.messageTypes() > 1:
			return Created{}, ErrOneMessageType // LionAGI's check comes first
		case in.TargetKind != nil && *in.TargetKind != v.msg.Kind():
			return Created{}, kindChange("and the input is for " + article(*in.TargetKind))
		}
		if name := f.otherKindInput(v.msg.Kind()); name != "" {
			return Created{}, kindChange("and " + name + " is not one of its inputs")
		}
	}
	if in.ActionRequest != nil {
		v, err := b.actionRequest(*in.ActionRequest, "action_output.action_request_id")
		if err != nil {
			return Created{}, err
		}
		f.ActionRequestMsg = v.msg
	}
	return CreateMessage(f)
}

// article names a message kind with its article ("an Instruction").
func article(k envelope.Kind) string {
	name := k.String()
	if strings.ContainsRune("AEIOU", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}

// actionRequest returns the ActionRequest named by the request field
// field.
func (b *branch) actionRequest(id uuid.UUID, field string) (*version, error) {
	v, ok := b.get(id)
	if !ok {
		return nil, &MessageError{Err: ErrMessageNotFound, BranchID: b.id, MessageID: id, Field: field}
	}
	if v.msg.Kind() != envelope.KindActionRequest {
		return nil, &MessageError{Err: ErrNotActionRequest, BranchID: b.id, MessageID: id, Field: field}
	}
	return v, nil
}

// commitCreated writes what the factory made: the message, then the
// request it answered when that request is in the branch. field is the
// request field that gave the message, when the caller gave it whole.
func (m *Memory) commitCreated(b *branch, c Created, field string) (written, error) {
	p, err := b.plan(c.Message, field)
	if err != nil {
		return written{}, err
	}
	ps := []placement{p}
	if c.Request != nil {
		if _, inBranch := b.get(c.Request.ID); inBranch {
			rp, err := b.plan(c.Request, "")
			if err != nil {
				return written{}, err
			}
			rp.inPlace = true // LionAGI links the request in place: it keeps its collections rank
			ps = append(ps, rp)
		}
	}
	vs, err := m.commitMessages(b, ps)
	if err != nil {
		return written{}, err
	}
	res := WriteResult{Message: vs[0].stored(), Index: b.index(vs[0]), Head: b.head}
	if len(vs) > 1 {
		u := vs[1].stored()
		res.Updated = &u
	}
	return written{res: res, versions: vs, added: c.Message}, nil
}

// CreateActionResponse answers an ActionRequest (Store.CreateActionResponse).
func (m *Memory) CreateActionResponse(ctx context.Context, branchID uuid.UUID, in ActionResponseInput, opts WriteOptions) (WriteResult, error) {
	return m.write(ctx, branchID, OpCreateActionResponse, opts, func(b *branch) (written, error) {
		req, err := b.actionRequest(in.Request, "action_request_id")
		if err != nil {
			return written{}, err
		}
		c, err := CreateActionResponse(&Factory{
			Sender: in.Sender, Recipient: in.Recipient,
			ActionRequestMsg: req.msg, ActionOutput: in.Output, ActionError: in.Error,
		})
		if err != nil {
			return written{}, err
		}
		return m.commitCreated(b, c, "")
	})
}

// ClearMessages is clear_messages (Store.ClearMessages): the system stays at
// index 0; the selected progression keeps only what survives. Clearing
// frees memory, so the memory budget never refuses it.
func (m *Memory) ClearMessages(ctx context.Context, branchID uuid.UUID, opts WriteOptions) (WriteResult, error) {
	return m.write(ctx, branchID, OpClearMessages, opts, func(b *branch) (written, error) {
		// A new map, not deletes: a Go map never shrinks, and the old one
		// would keep the buckets of every message ever added.
		kept := map[uuid.UUID]*version{}
		for id, v := range b.msgs {
			if v == b.system {
				kept[id] = v
			} else {
				m.unref(v)
			}
		}
		b.msgs = kept
		ranks := map[uuid.UUID]uint64{}
		if b.system != nil {
			ranks[b.system.msg.ID] = b.ranks[b.system.msg.ID]
		}
		b.ranks = ranks
		b.entries = nil
		b.views = [numViews][]int32{}
		b.epoch++
		if sel := b.selected; sel != nil {
			kept := slices.DeleteFunc(slices.Clone(sel.Order), func(id uuid.UUID) bool {
				_, ok := b.msgs[id]
				return !ok
			})
			if len(kept) != len(sel.Order) {
				sel = sel.Clone()
				sel.Order = kept
				b.selected = sel
				b.selEpoch++
			}
		}
		m.budget.used.Add(eventOverhead)
		m.recordEvent(b, Event{Kind: EventMessagesCleared}, eventOverhead)
		return written{res: WriteResult{Head: b.head, Index: -1}}, nil
	})
}

// SetProgression sets or unsets the selected progression
// (Store.SetProgression). Every id must be a member, once.
func (m *Memory) SetProgression(ctx context.Context, branchID uuid.UUID, order *[]uuid.UUID, opts WriteOptions) (WriteResult, error) {
	return m.write(ctx, branchID, OpSetProgression, opts, func(b *branch) (written, error) {
		var ids []uuid.UUID
		if order != nil {
			ids = slices.Clone(*order)
			if ids == nil {
				ids = []uuid.UUID{}
			}
			if err := b.checkMembers("progression.ids", ids, true); err != nil {
				return written{}, err
			}
		}
		size := int64(eventOverhead + 16*len(ids))
		if err := m.budget.reserve(size); err != nil {
			return written{}, err
		}
		switch {
		case order == nil:
			b.selected = nil
		case b.selected == nil:
			b.selected = NewProgression(ids, nil)
		default:
			sel := b.selected.Clone()
			sel.Order = ids
			b.selected = sel
		}
		b.selEpoch++
		m.recordEvent(b, Event{Kind: EventProgressionSet, Progression: slices.Clone(ids)}, size)
		return written{res: WriteResult{Head: b.head, Index: -1}}, nil
	})
}

// checkMembers checks that every id of an order is a message of the branch
// (and, with unique, appears once), else ErrInvalidProgression naming the
// first offender (ADR-0006 D3).
func (b *branch) checkMembers(field string, ids []uuid.UUID, unique bool) error {
	var seen map[uuid.UUID]bool
	if unique {
		seen = make(map[uuid.UUID]bool, len(ids))
	}
	for i, id := range ids {
		_, ok := b.msgs[id]
		if ok && unique {
			ok = !seen[id]
			seen[id] = true
		}
		if !ok {
			return &MessageError{Err: ErrInvalidProgression, BranchID: b.id, MessageID: id, Field: field + "[" + strconv.Itoa(i) + "]"}
		}
	}
	return nil
}
