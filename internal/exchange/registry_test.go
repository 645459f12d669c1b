package exchange

import (
	"runtime"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestRegistryTombstones: unregistering leaves tombstones that every reader skips and compaction
// drops, without changing what anyone sees: the registration order, Owners pages, a broadcast's
// recipients, and a view taken before an owner left (in which it is still there, as left).
func TestRegistryTombstones(t *testing.T) {
	const n = 200
	owners := make([]uuid.UUID, n)
	for i := range owners {
		owners[i] = uuid.New()
	}
	x := newRegistered(t, owners)
	before := x.reg.view()
	var kept []uuid.UUID
	for i, o := range owners {
		if i%4 == 0 {
			kept = append(kept, o)
		} else if _, ok := x.Unregister(o); !ok {
			t.Fatalf("Unregister(%d) = false", i)
		}
	}
	if x.reg.removed > compactRegistryAfter {
		t.Errorf("%d tombstones in an order of %d: not compacted", x.reg.removed, len(x.reg.order))
	}
	if got := x.OwnerIDs(); !slices.Equal(got, kept) {
		t.Fatalf("OwnerIDs = %d owners, want the %d kept in registration order", len(got), len(kept))
	}
	if paged := ownerPages(x, 0, 7, n); !slices.Equal(paged, kept) {
		t.Errorf("Owners pages = %d owners, want the %d kept", len(paged), len(kept))
	}
	m := mustSend(t, x, kept[0], envelope.None(), "all")
	if rep := mustCollect(t, x, kept[0]); !slices.Equal(rep.Deliveries[0].Reached, kept[1:]) || len(rep.Deliveries[0].Dropped) != 0 {
		t.Errorf("broadcast %s reached %d owners and dropped %d, want the %d others kept",
			m.ID, len(rep.Deliveries[0].Reached), len(rep.Deliveries[0].Dropped), len(kept)-1)
	}
	// The view taken before still holds all n owners, so a reader of it sees the departed ones
	// as left; one taken now holds only the kept.
	if got := countFlows(before); got != n {
		t.Errorf("an earlier view holds %d owners, want %d", got, n)
	}
	if got := countFlows(x.reg.view()); got != len(kept) {
		t.Errorf("a new view holds %d owners, want %d", got, len(kept))
	}
	// A returning owner goes to the end.
	if _, err := x.Register(owners[1]); err != nil {
		t.Fatal(err)
	}
	if got := x.OwnerIDs(); got[len(got)-1] != owners[1] || len(got) != len(kept)+1 {
		t.Errorf("re-registered owner not last: %d owners", len(got))
	}
}

// ownerPages reads up to maxPages Owners pages of limit, the first after after, and returns the
// ids of the owners they list.
func ownerPages(x *Exchange, after uint64, limit, maxPages int) []uuid.UUID {
	var ids []uuid.UUID
	for range maxPages {
		page := x.Owners(after, limit)
		for _, o := range page.Owners {
			ids = append(ids, o.ID)
		}
		if !page.More {
			break
		}
		after = page.Next
	}
	return ids
}

func countFlows(v view) int {
	n := 0
	for range v.flows(0) {
		n++
	}
	return n
}

// TestOwnersPagesPastClosedFlows (review finding MINOR 2): a page whose owners were all
// unregistered while it was read goes on past them instead of ending the listing early. B is
// closed but still in the view, as when its Unregister runs while Owners reads the page.
func TestOwnersPagesPastClosedFlows(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC, ownerD})
	b := x.lookup(ownerB)
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()

	first := x.Owners(0, 1)
	if len(first.Owners) != 1 || first.Owners[0].ID != ownerA || !first.More {
		t.Fatalf("first page %+v, want A and more", first)
	}
	got := ownerPages(x, first.Next, 1, 4)
	if want := []uuid.UUID{ownerC, ownerD}; !slices.Equal(got, want) {
		t.Errorf("pages after A = %v, want %v (B skipped, the listing not ended)", got, want)
	}
}

// bytesPerOp returns the heap bytes that op allocates per call, over k calls.
func bytesPerOp(k int, op func(i int)) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range k {
		op(i)
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(k)
}

// TestRegistryCostIsFlat (review finding M1): Register and Unregister allocate about the same per
// call with 32,000 owners registered as with 1,000 — no copy of the owner list under the registry's
// exclusive lock. A copy would cost 8 bytes per owner, 256 KB a call at 32,000.
func TestRegistryCostIsFlat(t *testing.T) {
	const k = 1000
	cost := map[int][2]float64{}
	for _, n := range []int{1_000, 32_000} {
		x := New()
		for range n {
			if _, err := x.Register(uuid.New()); err != nil {
				t.Fatal(err)
			}
		}
		ids := make([]uuid.UUID, k)
		for i := range ids {
			ids[i] = uuid.New()
		}
		reg := bytesPerOp(k, func(i int) { _, _ = x.Register(ids[i]) })
		unreg := bytesPerOp(k, func(i int) { x.Unregister(ids[i]) })
		cost[n] = [2]float64{reg, unreg}
		x.Close()
	}
	for i, op := range []string{"Register", "Unregister"} {
		small, large := cost[1_000][i], cost[32_000][i]
		t.Logf("%s: %.0f B/op with 1,000 owners, %.0f B/op with 32,000", op, small, large)
		if large > 2*small+1024 {
			t.Errorf("%s allocates %.0f B/op with 32,000 owners, %.0f with 1,000: it grows with the owners", op, large, small)
		}
	}
}
