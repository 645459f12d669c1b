package sqlrow

import (
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// Place is store.Memory's apply over rows: it sets the position and rank
// of m, the new row of a planned placement p, and changes the branch's row
// to hold it (its system, next position and rank, count, and the selected
// progression, which names a new system where it named the one p
// excludes). old is the row m replaces, nil for none. The engine writes
// m's row, and has deleted the row of the system p excludes first.
func Place(row *Branch, p store.Placement, old, m *Message) {
	msg := p.Message
	switch {
	case msg.Kind() == envelope.KindSystem:
		m.Pos = -1
		if p.Excluded != nil && row.Selected != nil {
			sel := row.Selected.Clone()
			for i, id := range sel.Order {
				if id == p.Excluded.ID {
					sel.Order[i] = msg.ID
				}
			}
			row.Selected = sel
		}
		row.SystemID = &msg.ID
	case old != nil:
		m.Pos = old.Pos
	default:
		m.Pos = row.NextPos
		row.NextPos++
	}
	if old != nil {
		m.Rank = old.Rank
	}
	if p.NewRank(old != nil) {
		m.Rank = row.NextRank
		row.NextRank++
	}
	if old == nil {
		row.Count++
	}
}
