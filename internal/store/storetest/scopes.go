package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
)

// VictimOtherIDs is how many distinct request ids the other client of the
// victim scenario writes (issue 11 case 6: "A client writing 100,001
// distinct ids on its own branches evicted a victim's id"): one past the
// store-wide cap of 100,000 ids that all scopes used to share.
const VictimOtherIDs = 100_001

// testScopesIsolated: issue 11 case 6 and ADR-0010: "One scope's traffic
// never evicts another scope's ids within the promised window" (10
// minutes and the scope's last 10,000 ids). A victim writes with request
// id R on its branch and creates a branch with request id C; another
// client writes 100,001 distinct ids on its own branches (more than one
// scope's bound, so spread over several) and creates branches under
// more ids than one scope keeps; the victim's retries write nothing and
// return the first responses.
func testScopesIsolated(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	victim := newBranch(t, st)
	first := addWith(t, st, victim, "R")
	created, err := st.CreateBranch(ctx(t), store.CreateBranchInput{Principal: "victim", RequestID: "C"})
	if err != nil {
		t.Fatal(err)
	}

	// The other client: more create ids than a scope keeps, in its own
	// principal's scope (each branch deleted at once, to stay small) ...
	for i := range store.DefaultRequestMax + 1 {
		res, err := st.CreateBranch(ctx(t), store.CreateBranchInput{Principal: "other", RequestID: fmt.Sprint("c", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.DeleteBranch(ctx(t), res.Branch.ID, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// ... and 100,001 write ids on its own branches, at most a scope's
	// bound on each. SetProgression writes no message, so the ids are
	// what the store keeps.
	var branches []uuid.UUID
	for i := range VictimOtherIDs {
		if i%store.DefaultRequestMax == 0 {
			branches = append(branches, newBranch(t, st))
		}
		if _, err := st.SetProgression(ctx(t), branches[len(branches)-1], nil, store.WriteOptions{RequestID: fmt.Sprint("w", i)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}

	again, err := st.AddMessage(ctx(t), victim, store.AddInput{Factory: store.Factory{Instruction: text("second")}}, store.WriteOptions{RequestID: "R"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Message.Message.ID != first.Message.Message.ID || again.Head != first.Head {
		t.Errorf("victim's retry after %d ids elsewhere = %+v, want the first response %+v", VictimOtherIDs, again, first)
	}
	if n := countMessages(t, st, victim); n != 1 {
		t.Errorf("victim's branch holds %d messages after the retry, want 1", n)
	}
	c2, err := st.CreateBranch(ctx(t), store.CreateBranchInput{Principal: "victim", RequestID: "C"})
	if err != nil || !c2.Replayed || c2.Branch.ID != created.Branch.ID {
		t.Errorf("victim's create retry = %+v, %v; want the first branch %s", c2.Branch, err, created.Branch.ID)
	}
	// The other client's scopes keep their own last 10,000.
	if res, err := st.CreateBranch(ctx(t), store.CreateBranchInput{Principal: "other", RequestID: "c0"}); err != nil || res.Replayed {
		t.Errorf("the other client's oldest create id, %d ids back in its scope, = %+v, %v; want forgotten", store.DefaultRequestMax+1, res, err)
	}
}

// testPrincipalScopes: ADR-0010: the calls that create a branch
// (CreateBranch, ImportBranch, ForkBranch) remember request ids per
// principal, so one caller's id neither replays nor collides with
// another's; within one principal, a repeat returns the first response.
func testPrincipalScopes(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	src := newBranch(t, st)
	calls := []struct {
		op   store.Op
		call func(principal string) (store.BranchResult, error)
	}{
		{store.OpCreateBranch, func(p string) (store.BranchResult, error) {
			return st.CreateBranch(ctx(t), store.CreateBranchInput{Principal: p, RequestID: "create"})
		}},
		{store.OpImportBranch, func(p string) (store.BranchResult, error) {
			return st.ImportBranch(ctx(t), store.ImportInput{Principal: p, RequestID: "import", Data: mustJSON(t, `[]`)})
		}},
		{store.OpForkBranch, func(p string) (store.BranchResult, error) {
			return st.ForkBranch(ctx(t), store.ForkInput{Principal: p, RequestID: "fork", Source: src})
		}},
	}
	for _, c := range calls {
		t.Run(string(c.op), func(t *testing.T) {
			a, err := c.call("alice")
			if err != nil || a.Replayed {
				t.Fatalf("alice = %+v, %v", a, err)
			}
			b, err := c.call("bob")
			if err != nil || b.Replayed || b.Branch.ID == a.Branch.ID {
				t.Fatalf("bob with alice's request id = %+v, %v; want a branch of his own", b, err)
			}
			anon, err := c.call("")
			if err != nil || anon.Replayed || anon.Branch.ID == a.Branch.ID || anon.Branch.ID == b.Branch.ID {
				t.Fatalf("no principal with the same request id = %+v, %v; want a branch of its own", anon, err)
			}
			again, err := c.call("alice")
			if err != nil || !again.Replayed || again.Branch.ID != a.Branch.ID {
				t.Errorf("alice's repeat = %+v, %v; want her first branch", again, err)
			}
			for p, want := range map[string]uuid.UUID{"alice": a.Branch.ID, "bob": b.Branch.ID, "": anon.Branch.ID} {
				r, ok, err := st.Recall(ctx(t), p, nil, c.op, requestIDOf(c.op))
				if err != nil || !ok || r.(store.BranchResult).Branch.ID != want {
					t.Errorf("Recall(%q) = %v, %v, %v; want %s", p, r, ok, err, want)
				}
			}
		})
	}
}

func requestIDOf(op store.Op) string {
	switch op {
	case store.OpCreateBranch:
		return "create"
	case store.OpImportBranch:
		return "import"
	}
	return "fork"
}

// testRequestIDsAfterRecreate: issue 13 item 13, docs/design.md#branches
// and ADR-0010: request ids do not survive a branch's delete and
// re-create: a branch created again under a deleted one's id is a new
// scope, for its writes and for its delete.
func testRequestIDsAfterRecreate(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	id := uuid.New()
	create := func() {
		t.Helper()
		if _, err := st.CreateBranch(ctx(t), store.CreateBranchInput{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	create()
	first := addWith(t, st, id, "R")
	del, err := st.DeleteBranch(ctx(t), id, store.WriteOptions{RequestID: "D"})
	if err != nil {
		t.Fatal(err)
	}
	// Before the re-create, a repeat of the delete is its first response.
	if again, err := st.DeleteBranch(ctx(t), id, store.WriteOptions{RequestID: "D"}); err != nil || !again.Replayed || again.LastSequence != del.LastSequence {
		t.Fatalf("repeated delete = %+v, %v; want the first response", again, err)
	}

	create()
	if _, ok, err := st.Recall(ctx(t), "", &id, store.OpAddMessage, "R"); ok || err != nil {
		t.Errorf("Recall(R) on the new branch = %v, %v; want nothing remembered", ok, err)
	}
	res := addWith(t, st, id, "R")
	if res.Replayed || res.Message.Message.ID == first.Message.Message.ID {
		t.Errorf("AddMessage(R) on the new branch = %+v; want a new write", res)
	}
	if n := countMessages(t, st, id); n != 1 {
		t.Errorf("new branch holds %d messages, want 1", n)
	}
	if _, ok, err := st.Recall(ctx(t), "", &id, store.OpDeleteBranch, "D"); ok || err != nil {
		t.Errorf("Recall(D) on the new branch = %v, %v; want nothing remembered", ok, err)
	}
	again, err := st.DeleteBranch(ctx(t), id, store.WriteOptions{RequestID: "D"})
	if err != nil || again.Replayed {
		t.Fatalf("DeleteBranch(D) of the new branch = %+v, %v; want it deleted", again, err)
	}
	if _, err := st.GetBranch(ctx(t), id); !errors.Is(err, store.ErrBranchNotFound) {
		t.Errorf("GetBranch after the new branch's delete: %v, want ErrBranchNotFound", err)
	}
}

// testRequestIDsNotEvictedByBudget: ADR-0010, issue 11: the records are
// charged to the memory budget, and "a full budget refuses new writes
// ... it never evicts live ids early": writes with request ids run until
// the budget refuses one; the refused write changes nothing, and every id
// written before still returns its first response.
func testRequestIDsNotEvictedByBudget(t *testing.T, newStore Factory) {
	st := newStore(t, Options{MemoryBudget: 256 << 10})
	b := newBranch(t, st)
	var done []store.WriteResult
	for i := 0; ; i++ {
		if i > 100_000 {
			t.Fatal("the budget never refused a write")
		}
		snap := take(t, st, b)
		res, err := st.SetProgression(ctx(t), b, nil, store.WriteOptions{RequestID: fmt.Sprint("p", i)})
		if errors.Is(err, store.ErrMemoryBudget) {
			unchanged(t, st, b, snap)
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, res)
	}
	if len(done) == 0 {
		t.Fatal("the first write was refused")
	}
	for i, first := range done {
		again, err := st.SetProgression(ctx(t), b, nil, store.WriteOptions{RequestID: fmt.Sprint("p", i)})
		if err != nil || !again.Replayed || again.Head != first.Head {
			t.Fatalf("repeat %d of %d with a full budget = %+v, %v; want the first response (head %d)", i, len(done), again, err, first.Head)
		}
	}
	// Deleting gives room back, even with its own request id.
	if _, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{RequestID: "del"}); err != nil {
		t.Fatalf("DeleteBranch with a full budget: %v", err)
	}
	c := newBranch(t, st)
	if res, err := st.SetProgression(ctx(t), c, nil, store.WriteOptions{RequestID: "after"}); err != nil || res.Replayed {
		t.Errorf("a write after the delete = %+v, %v", res, err)
	}
}

// countMessages returns how many messages the branch holds.
func countMessages(t *testing.T, st store.Store, b uuid.UUID) int {
	t.Helper()
	page, err := st.ListMessages(ctx(t), b, store.ListInput{PageSize: store.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Messages)
}
