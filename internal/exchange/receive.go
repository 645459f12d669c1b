package exchange

import (
	"slices"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Cursor is a position in an owner's inboxes for ReceivePage; the zero Cursor is the start.
type Cursor struct {
	// Inbox is the creation ordinal of the inbox of the last message returned: a number that stays
	// valid when inboxes before it are reclaimed (it is not an index).
	Inbox uint64
	// Seq is the flow insertion number of the last message returned.
	Seq uint64
}

// ReceivedPage is one page of an owner's inboxes.
type ReceivedPage struct {
	// Messages are the messages, inbox creation order first, then oldest first (ADR-0006 D5).
	Messages []*envelope.Message
	// Cursors are the positions of Messages, one each: a caller that returns only a prefix of
	// the page (to stay within a response budget) resumes after the last one it returned.
	Cursors []Cursor
	// Leases are the lease states of Messages, one each (issue 18: Receive shows leased messages
	// marked); nil when no message of the page was ever leased.
	Leases []LeaseInfo
	// Next is where the following page starts, when More is set.
	Next Cursor
	// More is set when messages follow the last one returned.
	More bool
}

// Receive returns the messages in owner's inboxes without removing them: inboxes in creation
// order, each oldest first, only the inbox of sender when sender is not nil (ADR-0006 D5: receive
// is non-destructive and optionally filters by sender). An owner that is not registered has none.
func (x *Exchange) Receive(owner uuid.UUID, sender *uuid.UUID) []*envelope.Message {
	return x.ReceivePage(owner, sender, Cursor{}, 0).Messages
}

// ReceivePage is Receive in pages: up to limit messages after the cursor (limit <= 0: all). A
// message popped between pages is not returned; one delivered meanwhile to an inbox already passed
// is returned by a later Receive, not this walk. A page costs O(log n) to find its start plus
// O(messages returned + inboxes walked); with a sender, only that sender's inbox is looked at.
func (x *Exchange) ReceivePage(owner uuid.UUID, sender *uuid.UUID, after Cursor, limit int) ReceivedPage {
	f := x.lookup(owner)
	if f == nil {
		return ReceivedPage{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ReceivedPage{}
	}
	x.expireLeases(f)
	var page ReceivedPage
	if sender != nil {
		if p := f.byName[inboxName(*sender)]; p != nil && p.ord >= after.Inbox {
			page.add(p, after, limit)
		}
		return page
	}
	for _, p := range f.progs[f.progressionAt(after.Inbox):] {
		if !p.inbox || p.removed {
			continue
		}
		if !page.add(p, after, limit) {
			break
		}
	}
	return page
}

// add appends p's messages after the cursor until the page holds limit; false once it is full and
// more follow. The lease states go along from the first entry that has one (ReceivedPage.Leases).
func (page *ReceivedPage) add(p *progression, after Cursor, limit int) bool {
	live := p.live()
	if p.ord == after.Inbox {
		// Entries are in insertion order, so the cursor's successor is found by binary search.
		i, _ := slices.BinarySearchFunc(live, after.Seq+1, func(e entry, seq uint64) int { return cmpUint(e.seq, seq) })
		live = live[i:]
	}
	for _, e := range live {
		if limit > 0 && len(page.Messages) == limit {
			page.More = true
			return false
		}
		if e.attempts() > 0 && page.Leases == nil {
			page.Leases = make([]LeaseInfo, len(page.Messages), cap(page.Messages))
		}
		page.Messages = append(page.Messages, e.msg)
		page.Next = Cursor{Inbox: p.ord, Seq: e.seq}
		page.Cursors = append(page.Cursors, page.Next)
		if page.Leases != nil {
			page.Leases = append(page.Leases, e.leaseInfo())
		}
	}
	return true
}

// Pop removes and returns the oldest message of sender's inbox in owner's flow; false when the
// owner is not registered or the inbox is missing or holds no visible message (ADR-0006 D5:
// pop_message; issue 18: a leased message, or one a Nack's delay hides, is never popped, the
// oldest visible one behind it is). The Pop that empties the inbox of a sender that is no longer
// registered reclaims the inbox (reclaim.go).
func (x *Exchange) Pop(owner, sender uuid.UUID) (*envelope.Message, bool) {
	m, ok, _ := x.PopIf(owner, sender, nil)
	return m, ok
}

// PopIf is Pop that removes the oldest message only if check, given it, returns nil (issue 11: a
// destructive read never loses what it could not deliver). An error from check is returned as it
// is and the message stays at the head of its inbox, so a caller that cannot hand it on (a
// response too large for the client) loses nothing. check runs under the owner's lock, after which
// the removal is immediate; it must not call the Exchange. With no message to pop, check is not
// called and the answer is (nil, false, nil).
func (x *Exchange) PopIf(owner, sender uuid.UUID, check func(*envelope.Message) error) (*envelope.Message, bool, error) {
	f := x.lookup(owner)
	if f == nil {
		return nil, false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false, nil
	}
	var now int64 // read only when a lease may hide the head
	if f.leased > 0 {
		t := x.opts.now()
		x.expireLeasesAt(f, t)
		now = t.UnixNano()
	}
	p, ok := f.byName[inboxName(sender)]
	if !ok || p.len() == 0 {
		return nil, false, nil
	}
	i := 0
	if p.leased > 0 {
		if i = p.firstVisible(now); i < 0 {
			return nil, false, nil
		}
	}
	if check != nil {
		if err := check(p.live()[i].msg); err != nil {
			return nil, false, err
		}
	}
	var e entry
	if p.leased == 0 {
		e, _ = f.popFront(p) // the lease-free path, as it was before leases
	} else {
		e = f.removeAt(p, i)
	}
	x.budget.release(e.bytes())
	if p.len() == 0 && !x.isRegistered(sender) {
		f.reclaim(p)
	}
	return e.msg, true, nil
}
