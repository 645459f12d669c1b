package sqlite

import (
	"context"
	"database/sql"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// The reads: each in one read transaction, so what it returns (a page and
// the head, say) is one committed state. Pages cost O(page): the full
// order and the views are ranges of the messages_by_pos and
// messages_by_kind indexes. What a read makes of the rows is sqlrow's,
// the PostgreSQL engine's too.

// readRows is a read transaction's message rows (sqlrow.Rows).
type readRows struct {
	s   *Store
	ctx context.Context
	tx  *sql.Tx
}

func (r *readRows) Message(branch, id uuid.UUID) (*sqlrow.Message, bool, error) {
	return r.s.getMessage(r.ctx, &r.s.rst, r.tx, branch, id)
}

func (r *readRows) Positions(branch uuid.UUID, from int64, desc bool, limit int) ([]*sqlrow.Message, error) {
	q := qPosAsc
	if desc {
		q = qPosDesc
	}
	return scanMsgs(r.s.rst.query(r.ctx, r.tx, q, blob(branch), from, limit))
}

func (r *readRows) KindPositions(branch uuid.UUID, kind envelope.Kind, from int64, desc bool, limit int) ([]*sqlrow.Message, error) {
	q := qKindPosAsc
	if desc {
		q = qKindPosDesc
	}
	return scanMsgs(r.s.rst.query(r.ctx, r.tx, q, blob(branch), int(kind), from, limit))
}

// GetBranch describes a branch (store.Store).
func (s *Store) GetBranch(ctx context.Context, id uuid.UUID) (store.BranchInfo, error) {
	var info store.BranchInfo
	err := s.read(ctx, func(tx *sql.Tx) error {
		b, err := s.loadBranch(ctx, &s.rst, tx, id)
		if err == nil {
			info = b.Info()
		}
		return err
	})
	return info, err
}

// ListBranches pages through the branches in id order (store.Store), with
// store.Memory's tokens.
func (s *Store) ListBranches(ctx context.Context, size int, token string) (store.BranchPage, error) {
	size, err := store.PageSize(size)
	if err != nil {
		return store.BranchPage{}, err
	}
	after, err := sqlrow.BranchesAfter(token)
	if err != nil {
		return store.BranchPage{}, err
	}
	var branches []store.BranchInfo
	err = s.read(ctx, func(tx *sql.Tx) error {
		q := qBranchesFirst
		args := []any{size + 1}
		if after != nil {
			q = qBranchesAfter
			args = []any{blob(*after), size + 1}
		}
		rows, err := s.rst.query(ctx, tx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			b, err := scanBranch(rows)
			if err != nil {
				return err
			}
			branches = append(branches, b.Info())
		}
		return rows.Err()
	})
	if err != nil {
		return store.BranchPage{}, err
	}
	return sqlrow.BranchPage(branches, size), nil
}

// GetMessage returns one message and the head (store.Store).
func (s *Store) GetMessage(ctx context.Context, branchID, msgID uuid.UUID) (store.MessageRead, error) {
	var out store.MessageRead
	err := s.read(ctx, func(tx *sql.Tx) error {
		b, err := s.loadBranch(ctx, &s.rst, tx, branchID)
		if err != nil {
			return err
		}
		out, err = sqlrow.GetMessage(&readRows{s, ctx, tx}, b, msgID)
		return err
	})
	return out, err
}

// ListMessages pages through the full order, a view, or the selected
// progression (store.Store; sqlrow.ListPage).
func (s *Store) ListMessages(ctx context.Context, branchID uuid.UUID, in store.ListInput) (store.MessagePage, error) {
	size, err := store.CheckList(in)
	if err != nil {
		return store.MessagePage{}, err
	}
	var page store.MessagePage
	err = s.read(ctx, func(tx *sql.Tx) error {
		b, err := s.loadBranch(ctx, &s.rst, tx, branchID)
		if err != nil {
			return err
		}
		page, err = sqlrow.ListPage(&readRows{s, ctx, tx}, b, in, size)
		return err
	})
	return page, err
}

// LastMessage returns the last message of a view, and the head (store.Store).
func (s *Store) LastMessage(ctx context.Context, branchID uuid.UUID, view store.View) (store.MessageRead, bool, error) {
	if err := store.CheckView(view); err != nil {
		return store.MessageRead{}, false, err
	}
	var (
		out   store.MessageRead
		found bool
	)
	err := s.read(ctx, func(tx *sql.Tx) error {
		b, err := s.loadBranch(ctx, &s.rst, tx, branchID)
		if err != nil {
			return err
		}
		out, found, err = sqlrow.LastMessage(&readRows{s, ctx, tx}, b, view)
		return err
	})
	return out, found, err
}

// ToChatMessages is to_chat_msgs (store.Store): the order given (every id
// a member), the selected progression, or the full order, rendered after
// the read; with in.Each, each message goes to it as it is read, and the
// read stops at its first error (the caller's response budget).
func (s *Store) ToChatMessages(ctx context.Context, branchID uuid.UUID, in store.ChatInput) (store.ChatResult, error) {
	var head uint64
	sink := store.NewChatSink(in)
	err := s.read(ctx, func(tx *sql.Tx) error {
		b, err := s.loadBranch(ctx, &s.rst, tx, branchID)
		if err != nil {
			return err
		}
		head = b.Head
		var ids []uuid.UUID
		switch {
		case in.Order != nil:
			ids = *in.Order
			st := s.state(ctx, tx, b)
			st.c = &s.rst
			if err := store.CheckMembers(st, "order.ids", ids, false); err != nil {
				return err
			}
		case in.Selected && b.Selected != nil:
			ids = b.Selected.Order
		default:
			rows, err := s.rst.query(ctx, tx, qFullOrder, blob(b.ID))
			if err != nil {
				return err
			}
			return eachMsg(rows, func(m *sqlrow.Message) error { return sink.Take(m.Msg) })
		}
		return sqlrow.ChatMembers(&readRows{s, ctx, tx}, b.ID, ids, sink)
	})
	if err != nil {
		return store.ChatResult{}, err
	}
	return sink.Result(head), nil
}

// ExportBranch writes the branch as LionAGI JSON (store.Store).
// The rows are read one at a time: in.Each sees each message before the
// next is read, and stops the read with its error (sqlrow.ExportSink).
func (s *Store) ExportBranch(ctx context.Context, id uuid.UUID, in store.ExportInput) (store.Export, error) {
	var b *sqlrow.Branch
	sink := sqlrow.NewExportSink(in)
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		if b, err = s.loadBranch(ctx, &s.rst, tx, id); err != nil {
			return err
		}
		msgs, err := s.rst.query(ctx, tx, qFullOrder, blob(id))
		if err != nil {
			return err
		}
		return eachMsg(msgs, sink.Take)
	})
	if err != nil {
		return store.Export{}, err
	}
	return sink.Export(b)
}
