package store_test

import (
	"context"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// TestMemoryStats: the snapshot counts branches, messages (systems included) and open
// subscriptions, and reports the memory charged against the budget (issue 7: metrics for branches,
// messages and watchers, from a snapshot method of the domain).
func TestMemoryStats(t *testing.T) {
	ctx := context.Background()
	m := store.NewMemory(store.WithMemoryBudget(64 << 20))
	check := func(step string, branches, messages, watchers int) {
		t.Helper()
		st := m.Stats()
		if st.Branches != branches || st.Messages != messages || st.Watchers != watchers {
			t.Errorf("%s: Stats() = %+v, want %d branches, %d messages, %d watchers", step, st, branches, messages, watchers)
		}
		if st.MemoryBudget != 64<<20 || (branches > 0) != (st.MemoryUsed > 0) {
			t.Errorf("%s: memory %d of %d, want some used exactly when branches exist", step, st.MemoryUsed, st.MemoryBudget)
		}
	}
	check("empty", 0, 0, 0)

	a, err := m.CreateBranch(ctx, store.CreateBranchInput{System: jsonv.StringValue("be brief")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	check("created", 2, 1, 0)

	for _, text := range []string{"one", "two"} {
		in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(text)}}
		if _, err := m.AddMessage(ctx, b.Branch.ID, in, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	check("added", 2, 3, 0)

	sub, err := m.Subscribe(ctx, a.Branch.ID, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	check("watched", 2, 3, 1)
	sub.Close()
	check("unwatched", 2, 3, 0)

	if _, err := m.DeleteBranch(ctx, b.Branch.ID, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	check("deleted", 1, 1, 0)
}
