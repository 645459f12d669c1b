package store_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// TestClearGivesTheHeapBack (review MINOR 7): ClearMessages gives back the
// heap of the messages it removes, the branch's id index included (a Go map
// never shrinks, so deleting its keys one by one kept its buckets).
func TestClearGivesTheHeapBack(t *testing.T) {
	ctx := context.Background()
	const n = 50_000
	st := store.NewMemory(store.WithEventRetention(1)) // the log keeps no message after the clear
	before := liveHeap()
	res, err := st.CreateBranch(ctx, store.CreateBranchInput{System: jsonv.StringValue("S")})
	if err != nil {
		t.Fatal(err)
	}
	in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("i")}}
	for range n {
		if _, err := st.AddMessage(ctx, res.Branch.ID, in, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	full := liveHeap()
	if _, err := st.ClearMessages(ctx, res.Branch.ID, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	cleared := liveHeap()
	runtime.KeepAlive(st)
	t.Logf("heap: %d KiB before, %d KiB with %d messages, %d KiB after the clear", before>>10, full>>10, n, cleared>>10)
	if held := cleared - before; held > 256<<10 {
		t.Errorf("after the clear the branch still holds %d KiB of heap for %d messages it no longer has", held>>10, n)
	}
}

// liveHeap returns the live heap after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
