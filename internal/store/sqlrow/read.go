package sqlrow

import (
	"sort"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// Rows is how the reads here reach an engine's message rows, in one of
// its read transactions.
type Rows interface {
	// Message reads one current message of a branch; ok is false when it
	// is not a member.
	Message(branch, id uuid.UUID) (m *Message, ok bool, err error)
	// Positions reads up to limit messages of a branch by position from
	// from (inclusive), ascending or descending, the system at -1 included:
	// a range of the messages_by_pos index.
	Positions(branch uuid.UUID, from int64, desc bool, limit int) ([]*Message, error)
	// KindPositions is Positions over the messages of one kind: a range of
	// the messages_by_kind index.
	KindPositions(branch uuid.UUID, kind envelope.Kind, from int64, desc bool, limit int) ([]*Message, error)
}

// BranchesAfter reads a ListBranches page token: the id the page starts
// after, nil for the first page.
func BranchesAfter(token string) (*uuid.UUID, error) {
	if token == "" {
		return nil, nil
	}
	t, err := store.DecodePageToken(token, "branches", "id")
	if err != nil {
		return nil, err
	}
	id, err := uuid.Parse(t.After)
	if err != nil {
		return nil, store.FieldError("page_token", store.ErrStalePageToken, "page_token does not continue this listing")
	}
	return &id, nil
}

// BranchPage is the page of ListBranches, with store.Memory's tokens, of
// branches: up to size+1 of them in id order, the one past size telling
// that a next page exists.
func BranchPage(branches []store.BranchInfo, size int) store.BranchPage {
	out := store.BranchPage{Branches: branches}
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
	return out
}

// GetMessage is GetMessage's answer from b's rows: one message and the
// head.
func GetMessage(r Rows, b *Branch, id uuid.UUID) (store.MessageRead, error) {
	m, ok, err := r.Message(b.ID, id)
	switch {
	case err != nil:
		return store.MessageRead{}, err
	case !ok:
		return store.MessageRead{}, &store.MessageError{Err: store.ErrMessageNotFound, BranchID: b.ID, MessageID: id}
	}
	return store.MessageRead{StoredMessage: m.Stored(), Head: b.Head}, nil
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

// ListPage is a ListMessages page of b (in checked by store.CheckList, size
// its page size): the full order, a view, or the selected progression. A
// token holds the next position: an entry's position for the full order
// and the views (the system is -1), an index into the selected progression
// for it; the epoch makes tokens stale across a clear or a new selected
// progression, as store.Memory's do.
func ListPage(r Rows, b *Branch, in store.ListInput, size int) (store.MessagePage, error) {
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
		rows []*Message
		at   []int64 // at[i]: the position of rows[i]
		err  error
	)
	if selected {
		rows, at, err = selectedRows(r, b, next, in.Descending, size+1)
	} else {
		rows, err = positionRows(r, b.ID, viewKinds(in.View), in.View == store.ViewAll, next, in.Descending, size+1)
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
func positionRows(r Rows, branch uuid.UUID, kinds []envelope.Kind, all bool, next *int64, desc bool, limit int) ([]*Message, error) {
	var from int64
	if next != nil {
		from = *next
	} else if desc {
		from = int64(1) << 62
	} else {
		from = int64(-1)
	}
	if all {
		return r.Positions(branch, from, desc, limit)
	}
	var out []*Message
	for _, k := range kinds {
		rows, err := r.KindPositions(branch, k, from, desc, limit)
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
func selectedRows(r Rows, b *Branch, next *int64, desc bool, limit int) ([]*Message, []int64, error) {
	order := b.Selected.Order
	p, step := int64(0), int64(1)
	if desc {
		p, step = int64(len(order))-1, -1
	}
	if next != nil {
		p = *next
	}
	var (
		rows []*Message
		at   []int64
	)
	for ; p >= 0 && p < int64(len(order)) && len(rows) < limit; p += step {
		m, ok, err := r.Message(b.ID, order[p])
		if err != nil {
			return nil, nil, err
		}
		if ok {
			rows, at = append(rows, m), append(at, p)
		}
	}
	return rows, at, nil
}

// LastMessage is LastMessage's answer from b's rows (view checked by
// store.CheckView): the last message of the view, if any, and the head.
func LastMessage(r Rows, b *Branch, view store.View) (store.MessageRead, bool, error) {
	out := store.MessageRead{Head: b.Head}
	rows, err := positionRows(r, b.ID, viewKinds(view), view == store.ViewAll, nil, true, 1)
	if err != nil || len(rows) == 0 {
		return out, false, err
	}
	out.StoredMessage = rows[0].Stored()
	return out, true, nil
}

// ChatMembers hands sink the members among ids, in their order (a
// ToChatMessages of a given order or of the selected progression): an id
// that is no member is passed over.
func ChatMembers(r Rows, branch uuid.UUID, ids []uuid.UUID, sink *store.ChatSink) error {
	for _, id := range ids {
		m, ok, err := r.Message(branch, id)
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
}

// ExportSink is where an engine's ExportBranch puts the rows of the full
// order it reads, one at a time: each message goes to the input's Each
// before the next is read, and its error ends the read; a row keeps its
// message and not its text too.
type ExportSink struct {
	in   store.ExportInput
	rows []*Message
}

// NewExportSink returns the sink of an ExportBranch call of in.
func NewExportSink(in store.ExportInput) *ExportSink { return &ExportSink{in: in} }

// Reset empties the sink for a read run again (a retried transaction):
// Each is handed the full order from 0 again.
func (e *ExportSink) Reset() { e.rows = nil }

// Take shows m to Each, whose error ends the read and is the call's, and
// keeps it.
func (e *ExportSink) Take(m *Message) error {
	if e.in.Each != nil {
		if err := e.in.Each(len(e.rows), m.Msg); err != nil {
			return err
		}
	}
	m.Body = ""
	e.rows = append(e.rows, m)
	return nil
}

// Export writes b, with the rows taken, as LionAGI JSON.
func (e *ExportSink) Export(b *Branch) (store.Export, error) {
	rows := e.rows
	d := store.ExportData{
		ID: b.ID, CreatedAt: b.CreatedAt, Metadata: b.Metadata, Name: b.Name, User: b.User,
		Pile: b.Pile, Prog: b.Prog, Selected: b.Selected,
		Order: make([]*envelope.Message, len(rows)),
	}
	byRank := make([]*Message, len(rows))
	copy(byRank, rows)
	sort.Slice(byRank, func(i, j int) bool { return byRank[i].Rank < byRank[j].Rank })
	d.Collections = make([]*envelope.Message, len(rows))
	for i, m := range rows {
		d.Order[i], d.Collections[i] = m.Msg, byRank[i].Msg
		if m.Pos < 0 {
			d.System = m.Msg
		}
	}
	data, err := store.EncodeBranch(d, e.in.Mode, e.in.DBMetaKey)
	if err != nil {
		return store.Export{}, err
	}
	return store.Export{Data: data, Head: b.Head}, nil
}
