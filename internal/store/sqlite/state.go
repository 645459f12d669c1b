package sqlite

import (
	"context"
	"database/sql"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
)

// txState is a branch as the rules read it (store.BranchState) inside the
// write transaction that applies their plan: its row, and its messages
// read on demand (and kept for the rest of the write). apply writes a
// placement to the rows the way store.Memory's apply changes its maps.
type txState struct {
	s     *Store
	ctx   context.Context
	tx    *sql.Tx
	c     *stmtCache // the write side's; the read pool's for a read (CheckMembers of a chat order)
	row   *branchRow
	cache map[uuid.UUID]*msgRow // read or written by this write; nil entries are misses
	// encoded holds messages' stored text encoded before the write reached
	// the writer.
	encoded map[*envelope.Message]string
}

var _ store.BranchState = (*txState)(nil)

func (s *Store) state(ctx context.Context, tx *sql.Tx, row *branchRow) *txState {
	return &txState{s: s, ctx: ctx, tx: tx, c: &s.wst, row: row, cache: map[uuid.UUID]*msgRow{}, encoded: map[*envelope.Message]string{}}
}

func (st *txState) BranchID() uuid.UUID  { return st.row.id }
func (st *txState) HeadSequence() uint64 { return st.row.head }

func (st *txState) lookup(id uuid.UUID) (*msgRow, error) {
	if m, ok := st.cache[id]; ok {
		return m, nil
	}
	m, _, err := st.s.getMessage(st.ctx, st.c, st.tx, st.row.id, id)
	if err != nil {
		return nil, err
	}
	st.cache[id] = m
	return m, nil
}

func (st *txState) Current(id uuid.UUID) (*envelope.Message, bool, error) {
	m, err := st.lookup(id)
	if err != nil || m == nil {
		return nil, false, err
	}
	return m.msg, true, nil
}

func (st *txState) CurrentSystem() (*envelope.Message, error) {
	if st.row.systemID == nil {
		return nil, nil
	}
	m, err := st.lookup(*st.row.systemID)
	if err != nil || m == nil {
		return nil, err
	}
	return m.msg, nil
}

// apply writes a planned placement at sequence seq and returns the row it
// wrote and the message's index after it (store.Memory's apply, over rows).
func (st *txState) apply(p store.Placement, seq uint64) (*msgRow, int, error) {
	msg := p.Message
	body, ok := st.encoded[msg]
	if !ok {
		var err error
		if body, err = encodeMessage(msg); err != nil {
			return nil, 0, err
		}
	}
	var err error
	var old *msgRow
	if p.Replaces {
		if old, err = st.lookup(msg.ID); err != nil {
			return nil, 0, err
		}
	}
	row := st.row
	m := &msgRow{msg: msg, body: body, seq: seq}
	switch {
	case msg.Kind() == envelope.KindSystem:
		m.pos = -1
		if p.Excluded != nil {
			if err := st.remove(p.Excluded.ID); err != nil {
				return nil, 0, err
			}
			if row.selected != nil {
				sel := row.selected.Clone()
				for i, id := range sel.Order {
					if id == p.Excluded.ID {
						sel.Order[i] = msg.ID
					}
				}
				row.selected = sel
			}
		}
		row.systemID = &msg.ID
	case old != nil:
		m.pos = old.pos
	default:
		m.pos = row.nextPos
		row.nextPos++
	}
	if old != nil {
		m.rank = old.rank
	}
	if p.NewRank(old != nil) {
		m.rank = row.nextRank
		row.nextRank++
	}
	if old != nil {
		if err := st.keepVersion(old); err != nil {
			return nil, 0, err
		}
		_, err = st.s.wst.exec(st.ctx, st.tx, qReplaceMessage,
			m.rank, m.seq, body, blob(row.id), blob(msg.ID))
	} else {
		row.count++
		err = st.insert(m, body)
	}
	if err != nil {
		return nil, 0, err
	}
	st.cache[msg.ID] = m
	return m, row.index(m.pos), nil
}

// stored returns the text this transaction stored m with, if it wrote m's
// row (the remembered result of a write reuses it: requests.go).
func (st *txState) stored(m *envelope.Message) (string, bool) {
	if r := st.cache[m.ID]; r != nil && r.msg == m {
		return r.body, true
	}
	return "", false
}

// insert writes a new message row.
func (st *txState) insert(m *msgRow, body string) error {
	_, err := st.s.wst.exec(st.ctx, st.tx, qInsertMessage, blob(st.row.id), blob(m.msg.ID), m.pos, int(m.msg.Kind()), m.rank, m.seq, body)
	return err
}

// keepVersion copies a message version about to be rewritten or deleted
// into the event that wrote it, if that event is retained and still reads
// it from messages.
func (st *txState) keepVersion(old *msgRow) error {
	_, err := st.s.wst.exec(st.ctx, st.tx, qKeepVersion, rowjson.MessageEventBody(old.body), blob(st.row.incarnation), old.seq, blob(old.msg.ID))
	return err
}

// remove deletes a message row (the system a new System excludes).
func (st *txState) remove(id uuid.UUID) error {
	old, err := st.lookup(id)
	if err != nil {
		return err
	}
	if old != nil {
		if err := st.keepVersion(old); err != nil {
			return err
		}
	}
	if _, err := st.s.wst.exec(st.ctx, st.tx, qRemoveMessage, blob(st.row.id), blob(id)); err != nil {
		return err
	}
	st.row.count--
	st.cache[id] = nil
	return nil
}
