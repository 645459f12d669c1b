package sqlite

import (
	"context"
	"database/sql"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
	"github.com/historyd/historyd/internal/store/sqlrow"
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
	row   *sqlrow.Branch
	cache map[uuid.UUID]*sqlrow.Message // read or written by this write; nil entries are misses
	// encoded holds messages' stored text encoded before the write reached
	// the writer.
	encoded map[*envelope.Message]string
}

var _ store.BranchState = (*txState)(nil)

func (s *Store) state(ctx context.Context, tx *sql.Tx, row *sqlrow.Branch) *txState {
	return &txState{s: s, ctx: ctx, tx: tx, c: &s.wst, row: row, cache: map[uuid.UUID]*sqlrow.Message{}, encoded: map[*envelope.Message]string{}}
}

func (st *txState) BranchID() uuid.UUID  { return st.row.ID }
func (st *txState) HeadSequence() uint64 { return st.row.Head }

func (st *txState) lookup(id uuid.UUID) (*sqlrow.Message, error) {
	if m, ok := st.cache[id]; ok {
		return m, nil
	}
	m, _, err := st.s.getMessage(st.ctx, st.c, st.tx, st.row.ID, id)
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
	return m.Msg, true, nil
}

func (st *txState) CurrentSystem() (*envelope.Message, error) {
	if st.row.SystemID == nil {
		return nil, nil
	}
	m, err := st.lookup(*st.row.SystemID)
	if err != nil || m == nil {
		return nil, err
	}
	return m.Msg, nil
}

// apply writes a planned placement at sequence seq (placed by
// sqlrow.Place) and returns the row it wrote and the message's index after
// it.
func (st *txState) apply(p store.Placement, seq uint64) (*sqlrow.Message, int, error) {
	msg := p.Message
	body, ok := st.encoded[msg]
	if !ok {
		var err error
		if body, err = sqlrow.EncodeMessage(msg); err != nil {
			return nil, 0, err
		}
	}
	var err error
	var old *sqlrow.Message
	if p.Replaces {
		if old, err = st.lookup(msg.ID); err != nil {
			return nil, 0, err
		}
	}
	if msg.Kind() == envelope.KindSystem && p.Excluded != nil {
		if err := st.remove(p.Excluded.ID); err != nil {
			return nil, 0, err
		}
	}
	row := st.row
	m := &sqlrow.Message{Msg: msg, Body: body, Seq: seq}
	sqlrow.Place(row, p, old, m)
	if old != nil {
		if err := st.keepVersion(old); err != nil {
			return nil, 0, err
		}
		_, err = st.s.wst.exec(st.ctx, st.tx, qReplaceMessage,
			m.Rank, m.Seq, body, blob(row.ID), blob(msg.ID))
	} else {
		err = st.insert(m, body)
	}
	if err != nil {
		return nil, 0, err
	}
	st.cache[msg.ID] = m
	return m, row.Index(m.Pos), nil
}

// stored returns the text this transaction stored m with, if it wrote m's
// row (the remembered result of a write reuses it: requests.go).
func (st *txState) stored(m *envelope.Message) (string, bool) {
	if r := st.cache[m.ID]; r != nil && r.Msg == m {
		return r.Body, true
	}
	return "", false
}

// insert writes a new message row.
func (st *txState) insert(m *sqlrow.Message, body string) error {
	_, err := st.s.wst.exec(st.ctx, st.tx, qInsertMessage, blob(st.row.ID), blob(m.Msg.ID), m.Pos, int(m.Msg.Kind()), m.Rank, m.Seq, body)
	return err
}

// keepVersion copies a message version about to be rewritten or deleted
// into the event that wrote it, if that event is retained and still reads
// it from messages.
func (st *txState) keepVersion(old *sqlrow.Message) error {
	_, err := st.s.wst.exec(st.ctx, st.tx, qKeepVersion, rowjson.MessageEventBody(old.Body), blob(st.row.Incarnation), old.Seq, blob(old.Msg.ID))
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
	if _, err := st.s.wst.exec(st.ctx, st.tx, qRemoveMessage, blob(st.row.ID), blob(id)); err != nil {
		return err
	}
	st.row.Count--
	st.cache[id] = nil
	return nil
}
