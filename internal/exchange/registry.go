package exchange

import (
	"iter"
	"slices"
	"sync"

	"github.com/google/uuid"
)

// compactRegistryAfter is the number of removed owners the registration order may carry before it
// considers compacting (it compacts once they are also more than half of it): a few registrations'
// worth, so that a small Exchange is not copied on every Unregister.
const compactRegistryAfter = 64

// registry is the Exchange's owner index: a map for lookups and the registration order for the
// snapshots that walk every owner (a broadcast's recipients, CollectAll, Owners, Stats).
//
// Register and Unregister cost O(1) amortised under the exclusive lock, whatever the number of
// owners: a registration appends to the order, and an unregistration leaves its flow in the order
// as a tombstone (flow.removedAt) that readers skip, until tombstones are more than half of it and
// one copy drops them all.
type registry struct {
	// mu guards the fields below. It is the innermost of the Exchange's locks: it is held only for
	// map and slice operations, never while waiting for a flow's lock, so it may be taken while a
	// flow's locks are held (Unregister does).
	mu    sync.RWMutex
	flows map[uuid.UUID]*flow
	// order holds the flows in registration order, removed ones included until a compaction. A
	// reader may keep the slice after releasing mu: a registration writes past every length handed
	// out, and a compaction builds a new array, so what a reader holds never changes.
	order   []*flow
	removed int    // tombstones in order
	gen     uint64 // counts removals; a view taken at gen g holds the flows removed after g
	nextReg uint64 // the last registration number given
}

func (r *registry) init() { r.flows = map[uuid.UUID]*flow{} }

// lookup returns the registered flow of owner, or nil.
func (r *registry) lookup(owner uuid.UUID) *flow {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.flows[owner]
}

// add registers f for owner unless owner is registered, numbering it in registration order.
func (r *registry) add(owner uuid.UUID, mk func(regSeq uint64) *flow) (*flow, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.flows[owner]; ok {
		return nil, false
	}
	r.nextReg++
	f := mk(r.nextReg)
	r.flows[owner] = f
	// Appending writes past the length of every slice handed out, or into a new array: readers are
	// not disturbed, and no copy of the order is made beyond append's amortised growth.
	r.order = append(r.order, f)
	return f, true
}

// remove unregisters f, leaving a tombstone in the order. The caller holds f.mu.
func (r *registry) remove(f *flow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flows[f.owner] == f {
		delete(r.flows, f.owner)
	}
	r.gen++
	f.removedAt.Store(r.gen)
	r.removed++
	if r.removed > compactRegistryAfter && r.removed*2 > len(r.order) {
		// A new array, so views taken earlier keep theirs.
		live := make([]*flow, 0, len(r.order)-r.removed)
		for _, g := range r.order {
			if g.removedAt.Load() == 0 {
				live = append(live, g)
			}
		}
		r.order, r.removed = live, 0
	}
}

// len returns the number of registered owners.
func (r *registry) len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.flows)
}

// view returns the registered owners as of now.
func (r *registry) view() view {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return view{order: r.order, gen: r.gen}
}

// view is a snapshot of the registered owners: the flows registered when it was taken, in
// registration order. A flow unregistered since is still in the view (its flow is closed, which
// its readers check under its lock); one unregistered before is not.
type view struct {
	order []*flow
	gen   uint64
}

// has reports whether f was registered when v was taken; f is in v.order.
func (v view) has(f *flow) bool {
	g := f.removedAt.Load()
	return g == 0 || g > v.gen
}

// flows yields the view's flows in registration order, from index i of its order.
func (v view) flows(i int) iter.Seq2[int, *flow] {
	return func(yield func(int, *flow) bool) {
		for ; i < len(v.order); i++ {
			if f := v.order[i]; v.has(f) && !yield(i, f) {
				return
			}
		}
	}
}

// after returns the index in v.order of the first flow registered after registration number seq.
func (v view) after(seq uint64) int {
	i, _ := slices.BinarySearchFunc(v.order, seq+1, func(f *flow, s uint64) int { return cmpUint(f.regSeq, s) })
	return i
}
