package exchange

import (
	"testing"

	"github.com/google/uuid"
)

// TestSnapshotCostsOneCopy (review finding MINOR 5): Get copies the held messages once; it no
// longer also builds every progression's id list and sorts all the held entries into LionAGI's
// items order, under the owner's lock, which the wire never carried.
func TestSnapshotCostsOneCopy(t *testing.T) {
	const n = 10_000
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithMaxOutbox(0))
	for range n {
		mustSend(t, x, ownerB, to(ownerA), "in")
	}
	mustCollect(t, x, ownerB)
	for range n {
		mustSend(t, x, ownerA, to(ownerB), "out")
	}
	perGet := bytesPerOp(20, func(int) { x.Get(ownerA) })
	// One pointer per message (8 bytes each), twice for slack; the old views cost over 100 bytes
	// per message.
	if limit := 2 * 8 * 2 * float64(n); perGet > limit {
		t.Errorf("Get of %d messages allocates %.0f bytes, want at most %.0f", 2*n, perGet, limit)
	}
}
