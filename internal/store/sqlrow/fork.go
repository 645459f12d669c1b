package sqlrow

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// ForkThrough checks a fork's source row against in (its expected head,
// and the message it forks at, which get reads) and returns the position
// of the last entry the fork copies. The engines check in itself
// (store.CheckFork) before they read the source.
func ForkThrough(src *Branch, in store.ForkInput, get func(id uuid.UUID) (*Message, bool, error)) (int64, error) {
	if in.ExpectedHead != nil && *in.ExpectedHead != src.Head {
		return 0, &store.SequenceError{Err: store.ErrSequenceMismatch, BranchID: src.ID, Head: src.Head}
	}
	through := src.NextPos - 1
	if in.At != nil {
		at, ok, err := get(*in.At)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, &store.MessageError{Err: store.ErrMessageNotFound, BranchID: src.ID, MessageID: *in.At, Field: "message_id"}
		}
		through = at.Pos
	}
	return through, nil
}

// Messages returns the rows' messages, in their order.
func Messages(rows []*Message) []*envelope.Message {
	msgs := make([]*envelope.Message, len(rows))
	for i, m := range rows {
		msgs[i] = m.Msg
	}
	return msgs
}

// ForkCopies clones what a fork of src copies (store.ForkCopies): msgs,
// src's full order through the fork point, and its selected progression.
func ForkCopies(src *Branch, msgs []*envelope.Message) (copies []*envelope.Message, selected []uuid.UUID, err error) {
	var order []uuid.UUID
	if src.Selected != nil {
		order = src.Selected.Order
	}
	return store.ForkCopies(msgs, order, src.Selected != nil)
}

// Fork seeds a branch of ForkBranch (store.Memory's ForkBranch): src's
// name and user (in's name over it), its parent and fork point, and the
// copies and selected progression of ForkCopies.
func (b *Seed) Fork(src *Branch, in store.ForkInput, copies []*envelope.Message, selected []uuid.UUID) error {
	b.Row.Name, b.Row.User = src.Name, src.User
	if in.Name != nil {
		b.Row.Name = in.Name
	}
	parent := src.ID
	b.Row.Parent = &parent
	b.Row.Fork = store.ForkPoint(in.At, copies)
	for _, msg := range copies {
		if err := b.Add(msg, ""); err != nil { // a clone has a new id: it replaces nothing
			return err
		}
	}
	if selected != nil {
		b.Row.Selected = store.NewProgression(selected, nil)
	}
	return nil
}
