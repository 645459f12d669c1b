package postgres

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// The reads: each in one read transaction, so what it returns (a page and
// the head, say) is one committed state. Pages cost O(page): the full
// order and the views are ranges of the messages_by_pos and
// messages_by_kind indexes. What a read makes of the rows is sqlrow's,
// the SQLite engine's too.

// readRows is a read transaction's message rows (sqlrow.Rows).
type readRows struct {
	ctx context.Context
	tx  pgx.Tx
}

func (r *readRows) Message(branch, id uuid.UUID) (*sqlrow.Message, bool, error) {
	return getMessage(r.ctx, r.tx, branch, id)
}

func (r *readRows) Positions(branch uuid.UUID, from int64, desc bool, limit int) ([]*sqlrow.Message, error) {
	q := qPosAsc
	if desc {
		q = qPosDesc
	}
	return scanMsgs(r.tx.Query(r.ctx, q, branch, from, limit))
}

func (r *readRows) KindPositions(branch uuid.UUID, kind envelope.Kind, from int64, desc bool, limit int) ([]*sqlrow.Message, error) {
	q := qKindPosAsc
	if desc {
		q = qKindPosDesc
	}
	return scanMsgs(r.tx.Query(r.ctx, q, branch, int(kind), from, limit))
}

// GetBranch describes a branch (store.Store).
func (s *Store) GetBranch(ctx context.Context, id uuid.UUID) (store.BranchInfo, error) {
	var info store.BranchInfo
	err := s.read(ctx, func(tx pgx.Tx) error {
		b, err := loadBranch(ctx, tx, qBranch, id)
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
	err = s.read(ctx, func(tx pgx.Tx) error {
		q := qBranchesFirst
		args := []any{size + 1}
		if after != nil {
			q = qBranchesAfter
			args = []any{*after, size + 1}
		}
		rows, err := tx.Query(ctx, q, args...)
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
	err := s.read(ctx, func(tx pgx.Tx) error {
		b, err := loadBranch(ctx, tx, qBranch, branchID)
		if err != nil {
			return err
		}
		out, err = sqlrow.GetMessage(&readRows{ctx, tx}, b, msgID)
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
	err = s.read(ctx, func(tx pgx.Tx) error {
		b, err := loadBranch(ctx, tx, qBranch, branchID)
		if err != nil {
			return err
		}
		page, err = sqlrow.ListPage(&readRows{ctx, tx}, b, in, size)
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
	err := s.read(ctx, func(tx pgx.Tx) error {
		b, err := loadBranch(ctx, tx, qBranch, branchID)
		if err != nil {
			return err
		}
		out, found, err = sqlrow.LastMessage(&readRows{ctx, tx}, b, view)
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
	err := s.read(ctx, func(tx pgx.Tx) error {
		sink.Reset() // a retried read starts afresh (runTx), and in.Each at 0 again
		b, err := loadBranch(ctx, tx, qBranch, branchID)
		if err != nil {
			return err
		}
		head = b.Head
		var ids []uuid.UUID
		switch {
		case in.Order != nil:
			ids = *in.Order
			st := newState(ctx, tx, b)
			if err := store.CheckMembers(st, "order.ids", ids, false); err != nil {
				return err
			}
		case in.Selected && b.Selected != nil:
			ids = b.Selected.Order
		default:
			return eachInOrder(ctx, tx, b.ID, in.Each != nil, func(m *sqlrow.Message) error { return sink.Take(m.Msg) })
		}
		return sqlrow.ChatMembers(&readRows{ctx, tx}, b.ID, ids, sink)
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
	err := s.read(ctx, func(tx pgx.Tx) error {
		sink.Reset() // a retried read starts afresh (runTx), and in.Each at 0 again
		var err error
		if b, err = loadBranch(ctx, tx, qBranch, id); err != nil {
			return err
		}
		return eachInOrder(ctx, tx, id, in.Each != nil, sink.Take)
	})
	if err != nil {
		return store.Export{}, err
	}
	return sink.Export(b)
}

// eachFirstPage and eachMaxPage bound the rows eachInOrder reads per
// query. Pages double from the first: a read refused at its budget reads at
// most about as many rows past it as it read before, and one that takes a
// long branch costs a round trip per doubling, not per 64 rows (a review
// measured 5,000 messages exported 40-60% slower in pages of 64 than in
// one query).
const (
	eachFirstPage = 64
	eachMaxPage   = 4096
)

// eachInOrder hands the branch's messages to fn in the full order, one row
// at a time; fn's error ends it and is returned. One query reads them all,
// unless stops says fn may stop early (ChatInput.Each, ExportInput.Each):
// then they are read by position in pages (eachFirstPage), in the
// transaction's one snapshot, since closing a query's rows before their end
// has pgx read (and the server send) every row left: a refusal at the
// budget would still pull the whole branch through the connection. A page
// costs a round trip; a caller that takes every message is bounded by its
// budget too.
func eachInOrder(ctx context.Context, tx pgx.Tx, branch uuid.UUID, stops bool, fn func(*sqlrow.Message) error) error {
	if !stops {
		rows, err := tx.Query(ctx, qFullOrder, branch)
		if err != nil {
			return err
		}
		return eachMsg(rows, fn)
	}
	next := int64(-1) // the system's position
	for page := eachFirstPage; ; page = min(2*page, eachMaxPage) {
		rows, err := tx.Query(ctx, qPosAsc, branch, next, page)
		if err != nil {
			return err
		}
		n := 0
		err = eachMsg(rows, func(m *sqlrow.Message) error {
			n, next = n+1, m.Pos+1
			return fn(m)
		})
		if err != nil || n < page {
			return err
		}
	}
}
