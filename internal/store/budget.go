package store

import "sync/atomic"

// DefaultMemoryBudget is the memory backend's default budget: 1 GiB, which a
// small container holds with room for the Go runtime, while a runaway
// client is refused long before the process is killed for memory.
const DefaultMemoryBudget = 1 << 30

// budget counts the bytes the memory backend holds (an estimate of the
// heap its messages, events and branches use) against a limit; 0 means
// no limit.
type budget struct {
	limit int64
	used  atomic.Int64
}

// reserve charges n bytes, or refuses them with a *BudgetError when they
// would take the total over the limit; a refused reservation charges
// nothing.
func (b *budget) reserve(n int64) error {
	for {
		used := b.used.Load()
		if b.limit > 0 && used+n > b.limit {
			return &BudgetError{Need: n, Used: used, Budget: b.limit}
		}
		if b.used.CompareAndSwap(used, used+n) {
			return nil
		}
	}
}

// unref drops one holder of v and releases its bytes with the last. The
// holders (the branch state, the event log, remembered responses) live
// under different locks, so the count is atomic.
func (b *budget) unref(v *version) {
	if v.refs.Add(-1) == 0 {
		b.release(v.size)
	}
}

// release gives n bytes back.
func (b *budget) release(n int64) {
	if n != 0 {
		b.used.Add(-n)
	}
}
