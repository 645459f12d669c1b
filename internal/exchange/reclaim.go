package exchange

import "github.com/google/uuid"

// An inbox is reclaimed — removed from its flow — once it is empty and its sender is no longer
// registered, so that an owner many short-lived senders wrote to does not keep one progression per
// sender forever (each would cost memory and time on every Receive). Two moments cover every order
// of events: the Pop that empties the inbox of a sender that has left, and the Unregister of a
// sender, which visits the owners it delivered to and reclaims its inboxes there that are empty.
// A sender that registers again and delivers gets a new inbox, after every existing one.

// noteRecipient records that f's collect delivered to owner. The caller holds f.collectMu.
func (x *Exchange) noteRecipient(f *flow, owner uuid.UUID) {
	if _, ok := f.recipients[owner]; ok {
		return
	}
	if f.recipients == nil {
		f.recipients = map[uuid.UUID]struct{}{}
	}
	f.recipients[owner] = struct{}{}
	if n := len(f.recipients); n > 2*f.recipientsPruned+64 {
		// Forget recipients that have left: their flows, and so the inboxes, are gone. Each pruning
		// walks a set at least twice the size of the last one's result, so it is O(1) amortised.
		for id := range f.recipients {
			if !x.isRegistered(id) {
				delete(f.recipients, id)
			}
		}
		f.recipientsPruned = len(f.recipients)
	}
}

// reclaimInboxesOf reclaims the empty inboxes of sender f, which Unregister has just removed, at
// the owners f delivered to. The caller holds f.collectMu (so f.recipients is stable: f is closed
// and collects nothing more).
func (x *Exchange) reclaimInboxesOf(f *flow) {
	name := inboxName(f.owner)
	for id := range f.recipients {
		r := x.lookup(id)
		if r == nil {
			continue
		}
		r.mu.Lock()
		if p := r.byName[name]; p != nil && p.len() == 0 && !r.closed && !x.isRegistered(f.owner) {
			r.reclaim(p)
		}
		r.mu.Unlock()
	}
	f.recipients = nil
}
