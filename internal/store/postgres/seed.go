package postgres

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// seedState is a branch being built by CreateBranch, ImportBranch or
// ForkBranch: its initial messages come whole in the request, so the
// rules run over them in memory (store.BranchState), and the branch is
// written in one transaction once built.
type seedState struct {
	row   *branchRow
	msgs  map[uuid.UUID]*msgRow
	order []uuid.UUID // the entries, by position
}

var _ store.BranchState = (*seedState)(nil)

func newSeed(row *branchRow) *seedState {
	return &seedState{row: row, msgs: map[uuid.UUID]*msgRow{}}
}

func (b *seedState) BranchID() uuid.UUID  { return b.row.id }
func (b *seedState) HeadSequence() uint64 { return b.row.head }

func (b *seedState) Current(id uuid.UUID) (*envelope.Message, bool, error) {
	m, ok := b.msgs[id]
	if !ok {
		return nil, false, nil
	}
	return m.msg, true, nil
}

func (b *seedState) CurrentSystem() (*envelope.Message, error) {
	if b.row.systemID == nil {
		return nil, nil
	}
	return b.msgs[*b.row.systemID].msg, nil
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
	m := &msgRow{msg: msg, seq: 1}
	switch {
	case msg.Kind() == envelope.KindSystem:
		m.pos = -1
		if p.Excluded != nil {
			delete(b.msgs, p.Excluded.ID)
		}
		row.systemID = &msg.ID
	case old != nil:
		m.pos = old.pos
	default:
		m.pos = int64(len(b.order))
		b.order = append(b.order, msg.ID)
	}
	if old != nil {
		m.rank = old.rank
	}
	if p.NewRank(old != nil) {
		m.rank = row.nextRank
		row.nextRank++
	}
	b.msgs[msg.ID] = m
	return nil
}

// ordered returns the messages in the full order.
func (b *seedState) ordered() []*msgRow {
	out := make([]*msgRow, 0, len(b.msgs))
	if b.row.systemID != nil {
		out = append(out, b.msgs[*b.row.systemID])
	}
	for _, id := range b.order {
		out = append(out, b.msgs[id])
	}
	return out
}

// finish completes the row: its counts and positions.
func (b *seedState) finish() {
	b.row.count = len(b.msgs)
	b.row.nextPos = int64(len(b.order))
	b.row.head = 1
}
