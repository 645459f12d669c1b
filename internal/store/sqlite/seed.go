package sqlite

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// seedState is a branch being built by CreateBranch, ImportBranch or
// ForkBranch: its initial messages come whole in the request, so the
// rules run over them in memory (store.BranchState), and the branch is
// written in one transaction once built.
type seedState struct {
	row   *sqlrow.Branch
	msgs  map[uuid.UUID]*sqlrow.Message
	order []uuid.UUID // the entries, by position
}

var _ store.BranchState = (*seedState)(nil)

func newSeed(row *sqlrow.Branch) *seedState {
	return &seedState{row: row, msgs: map[uuid.UUID]*sqlrow.Message{}}
}

func (b *seedState) BranchID() uuid.UUID  { return b.row.ID }
func (b *seedState) HeadSequence() uint64 { return b.row.Head }

func (b *seedState) Current(id uuid.UUID) (*envelope.Message, bool, error) {
	m, ok := b.msgs[id]
	if !ok {
		return nil, false, nil
	}
	return m.Msg, true, nil
}

func (b *seedState) CurrentSystem() (*envelope.Message, error) {
	if b.row.SystemID == nil {
		return nil, nil
	}
	return b.msgs[*b.row.SystemID].Msg, nil
}

// seed plans and applies one message with D3's rules (as store.Memory's
// seed); field is the request field that gave it.
func (b *seedState) seed(msg *envelope.Message, field string) error {
	p, err := store.PlanMessage(b, msg, field)
	if err != nil {
		return err
	}
	row := b.row
	old := b.msgs[msg.ID]
	m := &sqlrow.Message{Msg: msg, Seq: 1}
	switch {
	case msg.Kind() == envelope.KindSystem:
		m.Pos = -1
		if p.Excluded != nil {
			delete(b.msgs, p.Excluded.ID)
		}
		row.SystemID = &msg.ID
	case old != nil:
		m.Pos = old.Pos
	default:
		m.Pos = int64(len(b.order))
		b.order = append(b.order, msg.ID)
	}
	if old != nil {
		m.Rank = old.Rank
	}
	if p.NewRank(old != nil) {
		m.Rank = row.NextRank
		row.NextRank++
	}
	b.msgs[msg.ID] = m
	return nil
}

// ordered returns the messages in the full order.
func (b *seedState) ordered() []*sqlrow.Message {
	out := make([]*sqlrow.Message, 0, len(b.msgs))
	if b.row.SystemID != nil {
		out = append(out, b.msgs[*b.row.SystemID])
	}
	for _, id := range b.order {
		out = append(out, b.msgs[id])
	}
	return out
}

// finish completes the row: its counts and positions.
func (b *seedState) finish() {
	b.row.Count = len(b.msgs)
	b.row.NextPos = int64(len(b.order))
	b.row.Head = 1
}
