package sqlrow

import (
	"slices"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// Written is what a branch write did: its result, its commit (sequences
// set), and the message the observers are told about (nil for writes that
// fire none).
type Written struct {
	Res    store.WriteResult
	Commit store.Commit
	Added  *envelope.Message
}

// NextEvent returns the next event of a branch being written: its sequence
// follows the head and the events already in c.
func NextEvent(row *Branch, c store.Commit, kind store.EventKind) store.Event {
	return store.Event{Sequence: row.Head + 1 + uint64(len(c)), Kind: kind, Index: -1}
}

// CommitPlan applies a plan's placements as one commit, each through apply
// (the engine's: it places and writes the message at the sequence given,
// and returns its row and index); the result names the first message and,
// when the plan also linked a request, the request as Updated.
func CommitPlan(row *Branch, plan store.Plan, apply func(p store.Placement, seq uint64) (*Message, int, error)) (Written, error) {
	var (
		c      store.Commit
		stored []store.StoredMessage
		first  int
	)
	for i, p := range plan.Placements {
		ev := NextEvent(row, c, p.Kind())
		m, index, err := apply(p, ev.Sequence)
		if err != nil {
			return Written{}, err
		}
		ev.Message, ev.Index = p.Message, index
		c = append(c, ev)
		stored = append(stored, m.Stored())
		if i == 0 {
			first = index
		}
	}
	res := store.WriteResult{Message: stored[0], Index: first, Head: c[len(c)-1].Sequence}
	if len(stored) > 1 {
		res.Updated = &stored[1]
	}
	return Written{Res: res, Commit: c, Added: plan.Added}, nil
}

// Prebuilt is what add_message can do before its write reaches the
// engine's transaction (Prebuild).
type Prebuilt struct {
	created  store.Created
	body     string
	prebuilt bool
	err      error
}

// Prebuild runs the factory for inputs that name no message of the branch
// (no target, no action request, no message given whole or named in the
// factory), and encodes what it made; for the others it does nothing, and
// the message is planned in the transaction.
func Prebuild(in store.AddInput) Prebuilt {
	f := in.Factory
	if in.Message != nil || in.Target != nil || in.ActionRequest != nil ||
		f.SystemMsg != nil || f.InstructionMsg != nil || f.AssistantMsg != nil || f.ActionRequestMsg != nil || f.ActionResponseMsg != nil {
		return Prebuilt{}
	}
	c, err := store.CreateMessage(&f)
	if err != nil || c.Request != nil {
		return Prebuilt{prebuilt: err != nil, err: err} // a created request would be a branch message: plan it in the transaction
	}
	body, err := EncodeMessage(c.Message)
	return Prebuilt{created: c, body: body, prebuilt: true, err: err}
}

// Plan plans add_message on st, in the write's transaction: with what
// Prebuild made (its error returned where PlanAdd would return it, after
// the repeat and head checks), else with store.PlanAdd. The prebuilt
// message's id, which the factory minted, is no member, and its text is
// already encoded.
func (pb Prebuilt) Plan(st *State, in store.AddInput) (store.Plan, error) {
	if !pb.prebuilt {
		return store.PlanAdd(st, in)
	}
	if pb.err != nil {
		return store.Plan{}, pb.err
	}
	st.Cache[pb.created.Message.ID] = nil
	st.Encoded[pb.created.Message] = pb.body
	return store.PlanCreated(st, pb.created)
}

// Clear is clear_messages on the row, once the engine has deleted the
// entries' rows: the system stays at index 0; the selected progression
// keeps only what survives; the entries start again at position 0 in a new
// epoch, so older page tokens are stale.
func Clear(row *Branch) Written {
	row.Count, row.NextPos = 0, 0
	if row.HasSystem() {
		row.Count = 1
	}
	row.Epoch++
	if sel := row.Selected; sel != nil {
		if kept, changed := store.ClearedOrder(sel.Order, row.SystemID); changed {
			sel = sel.Clone()
			sel.Order = kept
			row.Selected = sel
			row.SelEpoch++
		}
	}
	c := store.Commit{NextEvent(row, nil, store.EventMessagesCleared)}
	return Written{Res: store.WriteResult{Head: c[0].Sequence, Index: -1}, Commit: c}
}

// SetProgression sets (order not nil) or unsets the selected progression
// on the row: ids, the order store.PlanProgression checked.
func SetProgression(row *Branch, order *[]uuid.UUID, ids []uuid.UUID) Written {
	switch {
	case order == nil:
		row.Selected = nil
	case row.Selected == nil:
		row.Selected = store.NewProgression(ids, nil)
	default:
		sel := row.Selected.Clone()
		sel.Order = ids
		row.Selected = sel
	}
	row.SelEpoch++
	ev := NextEvent(row, nil, store.EventProgressionSet)
	ev.Progression = slices.Clone(ids)
	return Written{Res: store.WriteResult{Head: ev.Sequence, Index: -1}, Commit: store.Commit{ev}}
}
