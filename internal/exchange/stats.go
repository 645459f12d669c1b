package exchange

import "sync/atomic"

// Stats is a snapshot of what an Exchange holds, for monitoring (historyd's metrics read it at
// each scrape; this package knows nothing of them). Each owner's numbers are read under its own
// lock, one owner after another, so the totals are not one atomic instant when sends and collects
// run meanwhile; each number is exact for its owner.
type Stats struct {
	// Owners is the number of registered owners.
	Owners int
	// Queued is the number of messages in outboxes, waiting to be collected.
	Queued int
	// Inbox is the number of messages in inboxes, waiting to be received or popped.
	Inbox int
	// DeadLetters is the number of dead letters held now, across owners.
	DeadLetters int
	// DeadLettered counts the dead letters made since New — Collect's drops and the leased
	// messages that reached their owner's MaxAttempts — including those later evicted by the
	// bound or returned by Unregister; it never decreases. The database engines count the same.
	DeadLettered uint64
	// Subscribers is the number of live inbox subscriptions.
	Subscribers int
	// Bytes is what the Exchange's byte budget is charged with now: held mail and remembered
	// requests (budget.go).
	Bytes int64
	// ByteBudget is the budget (WithByteBudget); 0 means none.
	ByteBudget int64
}

// statsCounters are the Exchange's monotonic counts, kept outside the flows so that an owner
// leaving does not take them away.
type statsCounters struct {
	deadLettered atomic.Uint64
}

// Stats returns a snapshot of the Exchange's contents. It takes each registered owner's lock
// briefly, never two at once, so it may run at any time.
func (x *Exchange) Stats() Stats {
	st := Stats{DeadLettered: x.stats.deadLettered.Load(), Bytes: x.budget.used.Load(), ByteBudget: x.budget.limit}
	for _, f := range x.reg.view().flows(0) {
		f.mu.Lock()
		if !f.closed {
			st.Owners++
			queued := f.outbox().len()
			st.Queued += queued
			st.Inbox += f.items - queued
			st.DeadLetters += f.dead.len()
			st.Subscribers += len(f.subs)
		}
		f.mu.Unlock()
	}
	return st
}
