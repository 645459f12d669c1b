package store

// Stats is a snapshot of what a Memory store holds, for monitoring (historyd's metrics read it at
// each scrape; this package knows nothing of them). Each branch is read under its own read lock,
// one after another, so the totals are not one atomic instant while writes run; each branch's
// numbers are exact.
type Stats struct {
	// Branches is the number of branches.
	Branches int
	// Messages is the number of messages across branches, systems included.
	Messages int
	// Watchers is the number of open subscriptions (WatchBranch streams) across branches.
	Watchers int
	// MemoryUsed is the store's estimate of the bytes it holds, charged against MemoryBudget.
	MemoryUsed int64
	// MemoryBudget is the configured budget in bytes; 0 means no limit.
	MemoryBudget int64
}

// Stats returns a snapshot of the store's contents. It holds the store lock only to copy the branch
// list and then each branch's read lock briefly, in the store's lock order, so it may run at any
// time without holding writers up for long.
func (m *Memory) Stats() Stats {
	m.mu.RLock()
	branches := make([]*branch, 0, len(m.branches))
	for _, b := range m.branches {
		branches = append(branches, b)
	}
	m.mu.RUnlock()

	st := Stats{MemoryUsed: m.budget.used.Load(), MemoryBudget: m.budget.limit}
	for _, b := range branches {
		b.mu.RLock()
		if !b.deleted {
			st.Branches++
			st.Messages += b.count()
			st.Watchers += b.feed.Watchers()
		}
		b.mu.RUnlock()
	}
	return st
}
