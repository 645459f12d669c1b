package store_test

import (
	"context"
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

// TestRequestCap (review B1): past WithRequestCap request ids in all
// scopes together, the oldest are forgotten first, whichever branch they
// belong to.
func TestRequestCap(t *testing.T) {
	ctx := context.Background()
	m := store.NewMemory(store.WithRequestCap(3))
	add := func(b uuid.UUID) store.WriteResult {
		t.Helper()
		res, err := m.AddMessage(ctx, b, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("i")}}, store.WriteOptions{RequestID: "r"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var branches []uuid.UUID
	for range 5 {
		res, err := m.CreateBranch(ctx, store.CreateBranchInput{})
		if err != nil {
			t.Fatal(err)
		}
		branches = append(branches, res.Branch.ID)
		add(res.Branch.ID)
	}
	if add(branches[0]).Replayed {
		t.Error("the oldest request id is still remembered past the store-wide cap")
	}
	if !add(branches[4]).Replayed {
		t.Error("the newest request id was forgotten")
	}
}
