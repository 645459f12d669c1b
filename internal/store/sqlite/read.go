package sqlite

import (
	"context"
	"database/sql"
	"sort"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// The reads: each in one read transaction, so what it returns (a page and
// the head, say) is one committed state. Pages cost O(page): the full
// order and the views are ranges of the messages_by_pos and
// messages_by_kind indexes.

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
	var after []byte
	if token != "" {
		t, err := store.DecodePageToken(token, "branches", "id")
		if err != nil {
			return store.BranchPage{}, err
		}
		id, err := uuid.Parse(t.After)
		if err != nil {
			return store.BranchPage{}, store.FieldError("page_token", store.ErrStalePageToken, "page_token does not continue this listing")
		}
		after = blob(id)
	}
	var out store.BranchPage
	err = s.read(ctx, func(tx *sql.Tx) error {
		q := qBranchesFirst
		args := []any{size + 1}
		if after != nil {
			q = qBranchesAfter
			args = []any{after, size + 1}
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
			out.Branches = append(out.Branches, b.Info())
		}
		return rows.Err()
	})
	if err != nil {
		return store.BranchPage{}, err
	}
	tokenAfter := func(n int) string {
		return store.EncodePageToken(store.PageToken{Scope: "branches", Query: "id", After: out.Branches[n-1].ID.String()})
	}
	if len(out.Branches) > size {
		out.Branches = out.Branches[:size]
		out.NextPageToken = tokenAfter(size)
	}
	if len(out.Branches) > 0 {
		out.TokenAfter = tokenAfter
	}
	return out, nil
}

// GetMessage returns one message and the head (store.Store).
func (s *Store) GetMessage(ctx context.Context, branchID, msgID uuid.UUID) (store.MessageRead, error) {
	var out store.MessageRead
	err := s.read(ctx, func(tx *sql.Tx) error {
		b, err := s.loadBranch(ctx, &s.rst, tx, branchID)
		if err != nil {
			return err
		}
		m, ok, err := s.getMessage(ctx, &s.rst, tx, branchID, msgID)
		switch {
		case err != nil:
			return err
		case !ok:
			return &store.MessageError{Err: store.ErrMessageNotFound, BranchID: branchID, MessageID: msgID}
		}
		out = store.MessageRead{StoredMessage: m.Stored(), Head: b.Head}
		return nil
	})
	return out, err
}

// viewKinds returns the message kinds of a view.
func viewKinds(v store.View) []envelope.Kind {
	var out []envelope.Kind
	for _, k := range []envelope.Kind{envelope.KindInstruction, envelope.KindAssistantResponse, envelope.KindActionRequest, envelope.KindActionResponse} {
		for _, kv := range store.ViewsOf(k) {
			if kv == v {
				out = append(out, k)
			}
		}
	}
	return out
}

// ListMessages pages through the full order, a view, or the selected
// progression (store.Store). A token holds the next position: an entry's
// position for the full order and the views (the system is -1), an index
// into the selected progression for it; the epoch makes tokens stale
// across a clear or a new selected progression, as store.Memory's do.
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
		page, err = s.listPage(ctx, tx, b, in, size)
		return err
	})
	return page, err
}

func (s *Store) listPage(ctx context.Context, tx *sql.Tx, b *sqlrow.Branch, in store.ListInput, size int) (store.MessagePage, error) {
	query, epoch := in.View.String(), b.Epoch
	selected := in.Selected && b.Selected != nil
	if selected {
		query, epoch = "selected", b.SelEpoch
	}
	if in.Descending {
		query += ",desc"
	}
	scope := b.Incarnation.String() // the branch id is not enough: a deleted branch's id can come back
	var next *int64
	if in.PageToken != "" {
		t, err := store.DecodePageToken(in.PageToken, scope, query)
		if err != nil {
			return store.MessagePage{}, err
		}
		if t.Epoch != epoch {
			return store.MessagePage{}, store.FieldError("page_token", store.ErrStalePageToken, "the listing changed since the token was made (cleared, or a new selected progression)")
		}
		next = &t.Next
	}
	var (
		rows []*sqlrow.Message
		at   []int64 // at[i]: the position of rows[i]
		err  error
	)
	if selected {
		rows, at, err = s.selectedRows(ctx, tx, b, next, in.Descending, size+1)
	} else {
		rows, err = s.positionRows(ctx, tx, b.ID, viewKinds(in.View), in.View == store.ViewAll, next, in.Descending, size+1)
		at = make([]int64, len(rows))
		for i, m := range rows {
			at[i] = m.Pos
		}
	}
	if err != nil {
		return store.MessagePage{}, err
	}
	step := int64(1)
	if in.Descending {
		step = -1
	}
	token := func(pos int64) string {
		return store.EncodePageToken(store.PageToken{Scope: scope, Query: query, Epoch: epoch, Next: pos})
	}
	page := store.MessagePage{Head: b.Head}
	if len(rows) > size {
		page.NextPageToken = token(at[size])
		rows, at = rows[:size], at[:size]
	}
	page.Messages = make([]store.StoredMessage, len(rows))
	for i, m := range rows {
		page.Messages[i] = m.Stored()
	}
	if len(rows) > 0 {
		page.TokenAfter = func(n int) string { return token(at[n-1] + step) }
	}
	return page, nil
}

// positionRows reads up to limit messages of a branch by position from
// next (inclusive; nil: the start), ascending or descending: every
// message (all, the system at -1 included) or those of kinds. A view of
// two kinds is read as two index ranges and merged, so the page stays
// O(page) whatever the branch's size.
func (s *Store) positionRows(ctx context.Context, tx *sql.Tx, branch uuid.UUID, kinds []envelope.Kind, all bool, next *int64, desc bool, limit int) ([]*sqlrow.Message, error) {
	all1, kind1 := qPosAsc, qKindPosAsc
	if desc {
		all1, kind1 = qPosDesc, qKindPosDesc
	}
	var from any
	if next != nil {
		from = *next
	} else if desc {
		from = int64(1) << 62
	} else {
		from = int64(-1)
	}
	if all {
		return scanMsgs(s.rst.query(ctx, tx, all1,
			blob(branch), from, limit))
	}
	var out []*sqlrow.Message
	for _, k := range kinds {
		rows, err := scanMsgs(s.rst.query(ctx, tx, kind1,
			blob(branch), int(k), from, limit))
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	sort.Slice(out, func(i, j int) bool {
		if desc {
			return out[i].Pos > out[j].Pos
		}
		return out[i].Pos < out[j].Pos
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// selectedRows reads up to limit members of the selected progression from
// index next (inclusive), skipping ids that are no longer members, as
// store.Memory's listing does.
func (s *Store) selectedRows(ctx context.Context, tx *sql.Tx, b *sqlrow.Branch, next *int64, desc bool, limit int) ([]*sqlrow.Message, []int64, error) {
	order := b.Selected.Order
	p, step := int64(0), int64(1)
	if desc {
		p, step = int64(len(order))-1, -1
	}
	if next != nil {
		p = *next
	}
	var (
		rows []*sqlrow.Message
		at   []int64
	)
	for ; p >= 0 && p < int64(len(order)) && len(rows) < limit; p += step {
		m, ok, err := s.getMessage(ctx, &s.rst, tx, b.ID, order[p])
		if err != nil {
			return nil, nil, err
		}
		if ok {
			rows, at = append(rows, m), append(at, p)
		}
	}
	return rows, at, nil
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
		out.Head = b.Head
		rows, err := s.positionRows(ctx, tx, b.ID, viewKinds(view), view == store.ViewAll, nil, true, 1)
		if err != nil || len(rows) == 0 {
			return err
		}
		out.StoredMessage, found = rows[0].Stored(), true
		return nil
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
		for _, id := range ids {
			m, ok, err := s.getMessage(ctx, &s.rst, tx, b.ID, id)
			if err != nil {
				return err
			}
			if ok {
				if err := sink.Take(m.Msg); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return store.ChatResult{}, err
	}
	return sink.Result(head), nil
}

// ExportBranch writes the branch as LionAGI JSON (store.Store).
// The rows are read one at a time: in.Each sees each message before the
// next is read, and stops the read with its error; a row keeps its message
// and not its text too.
func (s *Store) ExportBranch(ctx context.Context, id uuid.UUID, in store.ExportInput) (store.Export, error) {
	var (
		b    *sqlrow.Branch
		rows []*sqlrow.Message
	)
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		if b, err = s.loadBranch(ctx, &s.rst, tx, id); err != nil {
			return err
		}
		msgs, err := s.rst.query(ctx, tx, qFullOrder, blob(id))
		if err != nil {
			return err
		}
		return eachMsg(msgs, func(m *sqlrow.Message) error {
			if in.Each != nil {
				if err := in.Each(len(rows), m.Msg); err != nil {
					return err
				}
			}
			m.Body = ""
			rows = append(rows, m)
			return nil
		})
	})
	if err != nil {
		return store.Export{}, err
	}
	d := store.ExportData{
		ID: b.ID, CreatedAt: b.CreatedAt, Metadata: b.Metadata, Name: b.Name, User: b.User,
		Pile: b.Pile, Prog: b.Prog, Selected: b.Selected,
		Order: make([]*envelope.Message, len(rows)),
	}
	byRank := make([]*sqlrow.Message, len(rows))
	copy(byRank, rows)
	sort.Slice(byRank, func(i, j int) bool { return byRank[i].Rank < byRank[j].Rank })
	d.Collections = make([]*envelope.Message, len(rows))
	for i, m := range rows {
		d.Order[i], d.Collections[i] = m.Msg, byRank[i].Msg
		if m.Pos < 0 {
			d.System = m.Msg
		}
	}
	data, err := store.EncodeBranch(d, in.Mode, in.DBMetaKey)
	if err != nil {
		return store.Export{}, err
	}
	return store.Export{Data: data, Head: b.Head}, nil
}
