package exchange

import (
	"strings"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Cursor is a position in an owner's inboxes for ReceivePage; the zero Cursor is the start.
type Cursor struct {
	// Inbox is the index of the progression of the last message returned.
	Inbox int
	// Seq is the flow insertion number of the last message returned.
	Seq uint64
}

// ReceivedPage is one page of an owner's inboxes.
type ReceivedPage struct {
	// Messages are the messages, inbox creation order first, then oldest first (ADR-0006 D5).
	Messages []*envelope.Message
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
// is returned by a later Receive, not this walk.
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
	var page ReceivedPage
	for i := max(after.Inbox, 0); i < len(f.progs); i++ {
		p := f.progs[i]
		if !strings.HasPrefix(p.name, inboxPrefix) || (sender != nil && p.name != inboxName(*sender)) {
			continue
		}
		for _, e := range p.live() {
			if i == after.Inbox && e.seq <= after.Seq {
				continue
			}
			if limit > 0 && len(page.Messages) == limit {
				page.More = true
				return page
			}
			page.Messages = append(page.Messages, e.msg)
			page.Next = Cursor{Inbox: i, Seq: e.seq}
		}
	}
	return page
}

// Pop removes and returns the oldest message of sender's inbox in owner's flow; false when the
// owner is not registered or the inbox is missing or empty (ADR-0006 D5: pop_message).
func (x *Exchange) Pop(owner, sender uuid.UUID) (*envelope.Message, bool) {
	f := x.lookup(owner)
	if f == nil {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false
	}
	p, ok := f.byName[inboxName(sender)]
	if !ok {
		return nil, false
	}
	e, ok := p.popFront()
	if !ok {
		return nil, false
	}
	f.items--
	return e.msg, true
}
