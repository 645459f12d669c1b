package sqlite

import (
	"context"
	"database/sql"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// txState is a branch as the rules read it (sqlrow.State, a
// store.BranchState) inside the write transaction that applies their
// plan, with the statements that write it: apply writes a placement to the
// rows as store.Memory's apply changes its maps.
type txState struct {
	s   *Store
	ctx context.Context
	tx  *sql.Tx
	c   *stmtCache // the write side's; the read pool's for a read (CheckMembers of a chat order)
	// State's Encoded holds messages' stored text encoded before the write
	// reached the writer.
	sqlrow.State
}

var _ store.BranchState = (*txState)(nil)

func (s *Store) state(ctx context.Context, tx *sql.Tx, row *sqlrow.Branch) *txState {
	st := &txState{s: s, ctx: ctx, tx: tx, c: &s.wst}
	st.State = sqlrow.NewState(row, st)
	return st
}

// Message reads a message of the branch for the rules (sqlrow.State's
// MessageReader), through st.c.
func (st *txState) Message(branch, id uuid.UUID) (*sqlrow.Message, bool, error) {
	return st.s.getMessage(st.ctx, st.c, st.tx, branch, id)
}

// apply writes a planned placement at sequence seq (placed by
// sqlrow.State's Place) and returns the row it wrote and the message's
// index after it.
func (st *txState) apply(p store.Placement, seq uint64) (*sqlrow.Message, int, error) {
	m, old, err := st.Place(p, seq, st.remove)
	if err != nil {
		return nil, 0, err
	}
	row, msg, body := st.Row, m.Msg, m.Body
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
	st.Cache[msg.ID] = m
	return m, row.Index(m.Pos), nil
}

// insert writes a new message row.
func (st *txState) insert(m *sqlrow.Message, body string) error {
	_, err := st.s.wst.exec(st.ctx, st.tx, qInsertMessage, blob(st.Row.ID), blob(m.Msg.ID), m.Pos, int(m.Msg.Kind()), m.Rank, m.Seq, body)
	return err
}

// keepVersion copies a message version about to be rewritten or deleted
// into the event that wrote it, if that event is retained and still reads
// it from messages.
func (st *txState) keepVersion(old *sqlrow.Message) error {
	_, err := st.s.wst.exec(st.ctx, st.tx, qKeepVersion, rowjson.MessageEventBody(old.Body), blob(st.Row.Incarnation), old.Seq, blob(old.Msg.ID))
	return err
}

// remove deletes a message row (the system a new System excludes).
func (st *txState) remove(id uuid.UUID) error {
	old, err := st.Lookup(id)
	if err != nil {
		return err
	}
	if old != nil {
		if err := st.keepVersion(old); err != nil {
			return err
		}
	}
	if _, err := st.s.wst.exec(st.ctx, st.tx, qRemoveMessage, blob(st.Row.ID), blob(id)); err != nil {
		return err
	}
	st.Row.Count--
	st.Cache[id] = nil
	return nil
}
