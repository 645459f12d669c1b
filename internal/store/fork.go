package store

import (
	"context"
	"slices"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// ForkBranch copies a branch up to and including a message (Store.ForkBranch;
// docs/design.md#branches): the system always, each message as a clone (new
// id, metadata.clone_from = the source id, sender and recipient unchanged);
// reciprocal action ids are remapped when both ends are copied and cleared
// when only one is; the selected progression is copied, restricted to the
// copies; the new branch records its parent and fork point. Unlike LionAGI
// 0.27's Branch.clone, the copy has exactly one system (a recorded
// "differs").
func (m *Memory) ForkBranch(_ context.Context, in ForkInput) (BranchResult, error) {
	if r, ok, err := m.recallCreated(in.Principal, OpForkBranch, in.RequestID); err != nil || ok {
		return r, err
	}
	if err := CheckFork(in); err != nil {
		return BranchResult{}, err
	}
	src, err := m.readLocked(in.Source)
	if err != nil {
		return BranchResult{}, err
	}
	err = CheckHead(src, WriteOptions{ExpectedHead: in.ExpectedHead})
	var from forkSource
	if err == nil {
		from, err = src.forkSource(in.At)
	}
	src.mu.RUnlock()
	if err != nil {
		return BranchResult{}, err
	}
	m.unlocked()
	copies, selected, err := ForkCopies(from.messages(), from.selected, from.hasSelected)
	if err != nil {
		return BranchResult{}, err
	}
	info := from.info
	b, err := m.prepare(in.ID, nil, info.Metadata)
	if err != nil {
		return m.firstOr(err, in.Principal, OpForkBranch, in.RequestID)
	}
	b.name, b.user = info.Name, info.User
	if in.Name != nil {
		b.name = in.Name
	}
	parent := info.ID
	b.parent = &parent
	b.forkPoint = ForkPoint(in.At, copies)
	for _, msg := range copies {
		if err := m.seed(b, msg, ""); err != nil { // a clone has a new id: it replaces nothing
			m.discard(b)
			return BranchResult{}, err
		}
	}
	if selected != nil {
		b.selected = NewProgression(selected, nil)
	}
	return m.publish(b, OpForkBranch, in.Principal, in.RequestID)
}

// forkSource is what ForkBranch reads under the source's read lock: the
// versions to copy, the selected progression's order, and the branch. The
// copies are made after the lock is released (messages never change).
type forkSource struct {
	versions    []*version
	selected    []uuid.UUID
	hasSelected bool
	info        BranchInfo
}

// forkSource returns the messages of the full order up to and including
// at (all of them when at is nil). Branch read lock held.
func (b *branch) forkSource(at *uuid.UUID) (forkSource, error) {
	order := b.order()
	if at != nil {
		v, ok := b.get(*at)
		if !ok {
			return forkSource{}, &MessageError{Err: ErrMessageNotFound, BranchID: b.id, MessageID: *at, Field: "message_id"}
		}
		order = order[:b.index(v)+1]
	}
	src := forkSource{versions: b.versions(order), info: b.info()}
	if b.selected != nil {
		src.selected, src.hasSelected = slices.Clone(b.selected.Order), true
	}
	return src, nil
}

// messages returns the messages to copy.
func (s forkSource) messages() []*envelope.Message {
	out := make([]*envelope.Message, len(s.versions))
	for i, v := range s.versions {
		out[i] = v.msg
	}
	return out
}

// ForkCopies is a fork's rule (engine-neutral, rules.go): it clones the
// messages, remapping the reciprocal action ids, and maps the selected
// progression onto the copies (nil when none is set, hasSelected false).
func ForkCopies(msgs []*envelope.Message, selectedOrder []uuid.UUID, hasSelected bool) ([]*envelope.Message, []uuid.UUID, error) {
	idMap := make(map[uuid.UUID]uuid.UUID, len(msgs))
	clones := make([]*envelope.Message, len(msgs))
	for i, m := range msgs {
		c, err := m.Clone()
		if err != nil {
			return nil, nil, err
		}
		clones[i] = c
		idMap[m.ID] = c.ID
	}
	for i, c := range clones {
		var err error
		if clones[i], err = remapActionIDs(c, idMap); err != nil {
			return nil, nil, err
		}
	}
	if !hasSelected {
		return clones, nil, nil
	}
	selected := []uuid.UUID{}
	for _, id := range selectedOrder {
		if nid, ok := idMap[id]; ok {
			selected = append(selected, nid)
		}
	}
	return clones, selected, nil
}

// ForkPoint is the new branch's fork point: the message forked at, else
// the source of the last copy (nil when nothing was copied).
func ForkPoint(at *uuid.UUID, copies []*envelope.Message) *uuid.UUID {
	if at != nil {
		p := *at
		return &p
	}
	if n := len(copies); n > 0 {
		last, _ := copies[n-1].Metadata.Get("clone_from")
		s, _ := last.Str()
		if id, ok := envelope.ParseID(s); ok {
			return &id
		}
	}
	return nil
}

// remapActionIDs points a copied action message's reciprocal id at the copy
// of its partner, or clears it when the partner was not copied.
func remapActionIDs(m *envelope.Message, idMap map[uuid.UUID]uuid.UUID) (*envelope.Message, error) {
	var key string
	var ref *string
	switch c := m.Content.(type) {
	case *envelope.ActionRequestContent:
		key, ref = "action_response_id", c.ActionResponseID
	case *envelope.ActionResponseContent:
		key, ref = "action_request_id", c.ActionRequestID
	default:
		return m, nil
	}
	if ref == nil {
		return m, nil
	}
	val := jsonv.NullValue()
	if old, ok := envelope.ParseID(*ref); ok {
		if nid, copied := idMap[old]; copied {
			val = jsonv.StringValue(nid.String())
		}
	}
	content, err := envelope.ContentFromDict(m.Kind(), m.Content.Dict().Set(key, val))
	if err != nil {
		return nil, err
	}
	cp := m.Copy()
	cp.Content = content
	return cp, nil
}
