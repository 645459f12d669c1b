package store_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// TestRememberedResponsesAreCharged (review B1): the memory budget counts
// the messages that remembered responses keep alive after the branch let
// them go; an idle branch's ids expire as soon as any call uses a request
// id, and a deleted branch's write ids go with it.
func TestRememberedResponsesAreCharged(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := store.NewMemory(store.WithClock(clock), store.WithEventRetention(1)) // the log keeps no message after a clear
	const mib = 1 << 20
	big := jsonv.StringValue(strings.Repeat("x", mib))
	addAndClear := func(b uuid.UUID, requestID string) {
		t.Helper()
		if _, err := m.AddMessage(ctx, b, store.AddInput{Factory: store.Factory{Instruction: big}}, store.WriteOptions{RequestID: requestID}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ClearMessages(ctx, b, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	idle, err := m.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	addAndClear(idle.Branch.ID, "r")
	if used := m.MemoryUsed(); used < mib {
		t.Fatalf("MemoryUsed = %d after the clear, but a remembered response still holds the 1 MiB message", used)
	}

	mu.Lock()
	now = now.Add(store.DefaultRequestTTL + time.Second)
	mu.Unlock()
	other, err := m.CreateBranch(ctx, store.CreateBranchInput{RequestID: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if used := m.MemoryUsed(); used >= mib {
		t.Errorf("MemoryUsed = %d: the idle branch's expired request id still holds its message", used)
	}

	addAndClear(other.Branch.ID, "r")
	if _, err := m.DeleteBranch(ctx, other.Branch.ID, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if used := m.MemoryUsed(); used >= mib {
		t.Errorf("MemoryUsed = %d: the deleted branch's request ids still hold its message", used)
	}
}

// TestRequestQueuesStayCompact (ADR-0010): with no store-wide cap, the
// bookkeeping of forgotten ids must not pile up either: a scope written
// far past its bound, and ids expiring from the middle of many scopes,
// leave the store charged for the live records only, and its heap near
// what those cost.
func TestRequestQueuesStayCompact(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	const perScope = 100
	m := store.NewMemory(store.WithClock(clock), store.WithRequestWindow(time.Minute, perScope), store.WithEventRetention(1))
	a, err := m.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	// An id of another scope, older than every other and live throughout: the forgotten ids of b
	// pile up behind it in the ttl's queue unless they are swept.
	if _, err := m.SetProgression(ctx, a.Branch.ID, nil, store.WriteOptions{RequestID: "keep"}); err != nil {
		t.Fatal(err)
	}
	base := m.MemoryUsed()
	write := func(id string) {
		t.Helper()
		if _, err := m.SetProgression(ctx, b.Branch.ID, nil, store.WriteOptions{RequestID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		write(fmt.Sprint("warm", i))
	}
	full := m.MemoryUsed() // perScope records, the scope's queue at its bound
	before := heapAlloc()
	for i := range 200_000 {
		write(fmt.Sprint("r", i))
	}
	grown := heapAlloc() - before
	if used := m.MemoryUsed(); used != full {
		t.Errorf("MemoryUsed = %d after 200,000 more ids in one scope, want %d (its %d live records)", used, full, perScope)
	}
	if grown > 1<<20 {
		t.Errorf("heap grew by %d bytes while the scope stayed at its bound of %d ids", grown, perScope)
	}
	if res, err := m.SetProgression(ctx, a.Branch.ID, nil, store.WriteOptions{RequestID: "keep"}); err != nil || !res.Replayed {
		t.Errorf("the other scope's id = %+v, %v; want remembered", res, err)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	write("last")
	if used, want := m.MemoryUsed()-base, full-base; used >= want {
		t.Errorf("after the ttl the store holds %d bytes of records, want less than %d", used, want)
	}
}

func heapAlloc() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
