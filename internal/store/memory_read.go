package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
)

// GetBranch describes a branch (Store.GetBranch).
func (m *Memory) GetBranch(_ context.Context, id uuid.UUID) (BranchInfo, error) {
	b, err := m.readLocked(id)
	if err != nil {
		return BranchInfo{}, err
	}
	defer b.mu.RUnlock()
	return b.info(), nil
}

// ListBranches pages through the branches in id order (Store.ListBranches).
func (m *Memory) ListBranches(_ context.Context, size int, token string) (BranchPage, error) {
	size, err := pageSize(size)
	if err != nil {
		return BranchPage{}, err
	}
	m.mu.RLock()
	start := 0
	if token != "" {
		t, err := decodePageToken(token, "branches", "id")
		if err != nil {
			m.mu.RUnlock()
			return BranchPage{}, err
		}
		after, err := uuid.Parse(t.After)
		if err != nil {
			m.mu.RUnlock()
			return BranchPage{}, fieldErr("page_token", ErrStalePageToken, "page_token does not continue this listing")
		}
		i, found := slices.BinarySearchFunc(m.ids, after, compareIDs)
		if found {
			i++
		}
		start = i
	}
	end := min(start+size, len(m.ids))
	page := make([]*branch, 0, end-start)
	for _, id := range m.ids[start:end] {
		page = append(page, m.branches[id])
	}
	more := end < len(m.ids)
	m.mu.RUnlock()

	out := BranchPage{Branches: make([]BranchInfo, 0, len(page))}
	for _, b := range page {
		b.mu.RLock()
		if !b.deleted {
			out.Branches = append(out.Branches, b.info())
		}
		b.mu.RUnlock()
	}
	if more && len(page) > 0 {
		out.NextPageToken = pageToken{Scope: "branches", Query: "id", After: page[len(page)-1].id.String()}.encode()
	}
	if len(out.Branches) > 0 {
		out.TokenAfter = func(n int) string {
			return pageToken{Scope: "branches", Query: "id", After: out.Branches[n-1].ID.String()}.encode()
		}
	}
	return out, nil
}

// GetMessage returns one message (Store.GetMessage).
func (m *Memory) GetMessage(_ context.Context, branchID, msgID uuid.UUID) (MessageRead, error) {
	b, err := m.readLocked(branchID)
	if err != nil {
		return MessageRead{}, err
	}
	defer b.mu.RUnlock()
	v, ok := b.get(msgID)
	if !ok {
		return MessageRead{}, &MessageError{Err: ErrMessageNotFound, BranchID: branchID, MessageID: msgID}
	}
	return MessageRead{StoredMessage: v.stored(), Head: b.head}, nil
}

// ListMessages pages through the full order, a view, or the selected
// progression (Store.ListMessages); a page costs O(page size).
func (m *Memory) ListMessages(_ context.Context, branchID uuid.UUID, in ListInput) (MessagePage, error) {
	size, err := CheckList(in)
	if err != nil {
		return MessagePage{}, err
	}
	b, err := m.readLocked(branchID)
	if err != nil {
		return MessagePage{}, err
	}
	defer b.mu.RUnlock()

	// The list is addressed by positions lo..hi; at(p) returns the message
	// at a position (false for the empty system slot).
	var (
		lo, hi int64
		epoch  uint64
		query  string
		at     func(p int64) (*version, bool)
	)
	switch {
	case in.Selected && b.selected != nil:
		sel := b.selected.Order
		lo, hi, epoch, query = 0, int64(len(sel))-1, b.selEpoch, "selected"
		at = func(p int64) (*version, bool) { return b.get(sel[p]) }
	case in.View != ViewAll:
		list := b.views[in.View]
		lo, hi, epoch, query = 0, int64(len(list))-1, b.epoch, in.View.String()
		at = func(p int64) (*version, bool) { return b.get(b.entries[list[p]]) }
	default:
		lo, hi, epoch, query = -1, int64(len(b.entries))-1, b.epoch, "all"
		at = func(p int64) (*version, bool) {
			if p < 0 {
				return b.system, b.system != nil
			}
			return b.get(b.entries[p])
		}
	}
	step := int64(1)
	next := lo
	if in.Descending {
		step, next = -1, hi
		query += ",desc"
	}
	scope := b.incarnation.String() // the branch id is not enough: a deleted branch's id can come back
	if in.PageToken != "" {
		t, err := decodePageToken(in.PageToken, scope, query)
		if err != nil {
			return MessagePage{}, err
		}
		if t.Epoch != epoch {
			return MessagePage{}, fieldErr("page_token", ErrStalePageToken, "the listing changed since the token was made (cleared, or a new selected progression)")
		}
		next = t.Next
	}
	page := MessagePage{Head: b.head, Messages: make([]StoredMessage, 0, min(int64(size), hi-lo+1))}
	var after []int64 // after[i]: the position that follows the page's message i
	for ; next >= lo && next <= hi && len(page.Messages) < size; next += step {
		if v, ok := at(next); ok {
			page.Messages = append(page.Messages, v.stored())
			after = append(after, next+step)
		}
	}
	if len(after) > 0 {
		page.TokenAfter = func(n int) string {
			return pageToken{Scope: scope, Query: query, Epoch: epoch, Next: after[n-1]}.encode()
		}
	}
	// The system slot may be empty; it is the last position of a
	// descending listing and the first of an ascending one.
	more := next >= lo && next <= hi && !(next == -1 && b.system == nil)
	if more {
		page.NextPageToken = pageToken{Scope: scope, Query: query, Epoch: epoch, Next: next}.encode()
	}
	return page, nil
}

// LastMessage returns the last message of a view (Store.LastMessage):
// last_instruction and last_response search the order backwards and
// return None on a miss (ADR-0006 D3); here in O(1).
func (m *Memory) LastMessage(_ context.Context, branchID uuid.UUID, view View) (MessageRead, bool, error) {
	if err := CheckView(view); err != nil {
		return MessageRead{}, false, err
	}
	b, err := m.readLocked(branchID)
	if err != nil {
		return MessageRead{}, false, err
	}
	defer b.mu.RUnlock()
	v := b.last(view)
	if v == nil {
		return MessageRead{Head: b.head}, false, nil
	}
	return MessageRead{StoredMessage: v.stored(), Head: b.head}, true, nil
}

// last returns the last message of a view, nil when it has none. Branch
// read lock held.
func (b *branch) last(view View) *version {
	if view == ViewAll {
		if n := len(b.entries); n > 0 {
			v, _ := b.get(b.entries[n-1])
			return v
		}
		return b.system
	}
	list := b.views[view]
	if len(list) == 0 {
		return nil
	}
	v, _ := b.get(b.entries[list[len(list)-1]])
	return v
}

// ToChatMessages is to_chat_msgs (Store.ToChatMessages): an explicitly
// empty order gives nothing; otherwise the given order, the selected
// progression, or the full order is projected through chat_msg, and an id
// that is not a member fails the whole call (ADR-0006 D3). The messages
// are rendered after the branch lock is released: messages never change,
// so the versions read under the lock are the branch as it was.
func (m *Memory) ToChatMessages(_ context.Context, branchID uuid.UUID, in ChatInput) (ChatResult, error) {
	vs, head, err := m.chatVersions(branchID, in)
	if err != nil {
		return ChatResult{}, err
	}
	m.unlocked()
	sink := NewChatSink(in)
	for _, v := range vs {
		if err := sink.Take(v.msg); err != nil {
			return ChatResult{}, err
		}
	}
	return sink.Result(head), nil
}

// chatVersions returns, under the branch's read lock, the versions
// ToChatMessages projects and the head.
func (m *Memory) chatVersions(branchID uuid.UUID, in ChatInput) ([]*version, uint64, error) {
	b, err := m.readLocked(branchID)
	if err != nil {
		return nil, 0, err
	}
	defer b.mu.RUnlock()
	var ids []uuid.UUID
	switch {
	case in.Order != nil:
		ids = *in.Order
		if err := CheckMembers(b, "order.ids", ids, false); err != nil {
			return nil, 0, err
		}
	case in.Selected && b.selected != nil:
		ids = b.selected.Order
	default:
		ids = b.order()
	}
	return b.versions(ids), b.head, nil
}

// String describes the store for debugging.
func (m *Memory) String() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return fmt.Sprintf("store.Memory(%d branches, %d bytes)", len(m.branches), m.MemoryUsed())
}
