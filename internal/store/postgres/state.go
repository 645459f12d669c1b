package postgres

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// txState is a branch as the rules read it (sqlrow.State, a
// store.BranchState) inside the transaction that applies their plan, with
// the statements that write it: its row (read FOR UPDATE), and its
// messages read by id on demand and kept for the rest of the write. It
// never reads the history: an append reads nothing but the row (issue 16,
// "No convoys").
type txState struct {
	ctx context.Context
	tx  pgx.Tx
	q   querier // tx, or a read transaction for CheckMembers of a chat order
	sqlrow.State
	// b queues the write's statements, sent in one round trip with the
	// COMMIT (flush): the reads a plan makes never need them, since what
	// the write changed is in cache.
	b *pgx.Batch
}

var _ store.BranchState = (*txState)(nil)

func newState(ctx context.Context, tx pgx.Tx, row *sqlrow.Branch) *txState {
	st := &txState{ctx: ctx, tx: tx, q: tx, b: &pgx.Batch{}}
	st.State = sqlrow.NewState(row, st)
	return st
}

// Message reads a message of the branch for the rules (sqlrow.State's
// MessageReader), through st.q.
func (st *txState) Message(branch, id uuid.UUID) (*sqlrow.Message, bool, error) {
	return getMessage(st.ctx, st.q, branch, id)
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
		st.b.Queue(qReplaceMessage, m.Rank, int64(m.Seq), body, row.ID, msg.ID)
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
	st.b.Queue(qInsertMessage, st.Row.ID, m.Msg.ID, m.Pos, int(m.Msg.Kind()), m.Rank, int64(m.Seq), body)
	return nil
}

// flush hands the queued statements to the COMMIT (commitWith): they go
// out with it in one round trip.
func (st *txState) flush() error {
	b := st.b
	st.b = &pgx.Batch{}
	return commitWith(st.ctx, st.tx, b)
}

// keepVersion copies a message version about to be rewritten or deleted
// into the event that wrote it, if that event is retained and still reads
// it from messages.
func (st *txState) keepVersion(old *sqlrow.Message) error {
	st.b.Queue(qKeepVersion, rowjson.MessageEventBody(old.Body), st.Row.Incarnation, int64(old.Seq), old.Msg.ID)
	return nil
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
	st.b.Queue(qRemoveMessage, st.Row.ID, id)
	st.Row.Count--
	st.Cache[id] = nil
	return nil
}
