package store

import (
	"context"
	"slices"

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
// (first, docs/design.md#branches), the head check, then fn; a success is
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
	if err := CheckHead(b, opts); err != nil {
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
func (m *Memory) commitMessages(b *branch, ps []Placement) ([]*version, error) {
	sizes := make([]int64, len(ps))
	var total int64
	for i, p := range ps {
		sizes[i] = messageSize(p.Message)
		total += sizes[i]
	}
	if err := m.budget.reserve(total); err != nil {
		return nil, err
	}
	versions := make([]*version, len(ps))
	entries := make([]loggedEvent, len(ps))
	for i, p := range ps {
		seq := b.head + 1 + uint64(i)
		kind := p.Kind()
		v := m.apply(b, p, seq, sizes[i])
		versions[i] = v
		entries[i] = loggedEvent{ev: Event{Sequence: seq, Kind: kind, Message: p.Message, Index: b.index(v)}, versions: []*version{v}}
	}
	m.record(b, entries)
	return versions, nil
}

// recordEvent records an event that writes no message; its size is
// already charged.
func (m *Memory) recordEvent(b *branch, ev Event, size int64) {
	ev.Sequence = b.head + 1
	ev.Index = -1
	m.record(b, []loggedEvent{{ev: ev, size: size}})
}

// SetSystem is set_system (Store.SetSystem).
func (m *Memory) SetSystem(ctx context.Context, branchID uuid.UUID, system *envelope.Message, opts WriteOptions) (WriteResult, error) {
	return m.write(ctx, branchID, OpSetSystem, opts, func(b *branch) (written, error) {
		plan, err := PlanSetSystem(b, system)
		if err != nil {
			return written{}, err
		}
		return m.commitPlan(b, plan)
	})
}

// AddMessage is add_message (Store.AddMessage).
func (m *Memory) AddMessage(ctx context.Context, branchID uuid.UUID, in AddInput, opts WriteOptions) (WriteResult, error) {
	return m.write(ctx, branchID, OpAddMessage, opts, func(b *branch) (written, error) {
		plan, err := PlanAdd(b, in)
		if err != nil {
			return written{}, err
		}
		return m.commitPlan(b, plan)
	})
}

// commitPlan commits a plan's placements; the result names the first
// message and, when the plan also linked a request, the request as
// Updated.
func (m *Memory) commitPlan(b *branch, plan Plan) (written, error) {
	vs, err := m.commitMessages(b, plan.Placements)
	if err != nil {
		return written{}, err
	}
	res := WriteResult{Message: vs[0].stored(), Index: b.index(vs[0]), Head: b.head}
	if len(vs) > 1 {
		u := vs[1].stored()
		res.Updated = &u
	}
	return written{res: res, versions: vs, added: plan.Added}, nil
}

// CreateActionResponse answers an ActionRequest (Store.CreateActionResponse).
func (m *Memory) CreateActionResponse(ctx context.Context, branchID uuid.UUID, in ActionResponseInput, opts WriteOptions) (WriteResult, error) {
	return m.write(ctx, branchID, OpCreateActionResponse, opts, func(b *branch) (written, error) {
		plan, err := PlanActionResponse(b, in)
		if err != nil {
			return written{}, err
		}
		return m.commitPlan(b, plan)
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
		b.entries = nil
		b.views = [numViews][]int32{}
		b.epoch++
		if sel := b.selected; sel != nil {
			var keep *uuid.UUID
			if b.system != nil {
				keep = &b.system.msg.ID
			}
			if kept, changed := ClearedOrder(sel.Order, keep); changed {
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
		ids, err := PlanProgression(b, order)
		if err != nil {
			return written{}, err
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
