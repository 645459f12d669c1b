package storetest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// testReplayAfterChanges: a repeated request id returns the first
// response (docs/design.md#branches, AIP-155) also after the messages that
// response carried were cleared, replaced or pushed out of the event log,
// and, for the calls that create a branch, after the branch was deleted.
func testReplayAfterChanges(t *testing.T, newStore Factory) {
	st := newStore(t, Options{EventRetention: 2})
	created, err := st.CreateBranch(ctx(t), store.CreateBranchInput{System: text("S1"), RequestID: "create"})
	if err != nil {
		t.Fatal(err)
	}
	b := created.Branch.ID
	added, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("one")}}, store.WriteOptions{RequestID: "add"})
	if err != nil {
		t.Fatal(err)
	}
	req := addFactory(t, st, b, store.Factory{ActionFunction: text("f"), ActionArguments: jsonv.ObjectValue()}).Message.Message
	answered, err := st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: req.ID, Output: jsonv.IntValue(7)}, store.WriteOptions{RequestID: "respond"})
	if err != nil {
		t.Fatal(err)
	}
	sys, err := st.SetSystem(ctx(t), b, envelope.NewSystem("S2"), store.WriteOptions{RequestID: "system"})
	if err != nil {
		t.Fatal(err)
	}
	// Replace the instruction, clear everything, and push every event out of the log.
	addFactory(t, st, b, store.Factory{InstructionMsg: added.Message.Message, Guidance: text("g")})
	if _, err := st.ClearMessages(ctx(t), b, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	addInstruction(t, st, b, "x")
	addInstruction(t, st, b, "y")

	same := func(name string, got, want store.StoredMessage) {
		t.Helper()
		if got.Message == nil || want.Message == nil || got.Sequence != want.Sequence || got.Message.ID != want.Message.ID ||
			!jsonv.Equal(got.Message.Content.Dict(), want.Message.Content.Dict()) {
			t.Errorf("%s: replay returned %+v, want the first response's %+v", name, got, want)
		}
	}
	again, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("other")}}, store.WriteOptions{RequestID: "add"})
	if err != nil || !again.Replayed || again.Head != added.Head || again.Index != added.Index {
		t.Fatalf("repeated add = %+v, %v; first %+v", again, err, added)
	}
	same("AddMessage", again.Message, added.Message)
	again, err = st.CreateActionResponse(ctx(t), b, store.ActionResponseInput{Request: req.ID}, store.WriteOptions{RequestID: "respond"})
	if err != nil || !again.Replayed || again.Updated == nil {
		t.Fatalf("repeated action response = %+v, %v", again, err)
	}
	same("CreateActionResponse", again.Message, answered.Message)
	same("CreateActionResponse request", *again.Updated, *answered.Updated)
	again, err = st.SetSystem(ctx(t), b, envelope.NewSystem("S3"), store.WriteOptions{RequestID: "system"})
	if err != nil || !again.Replayed {
		t.Fatalf("repeated set system = %+v, %v", again, err)
	}
	same("SetSystem", again.Message, sys.Message)

	if _, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	first := created.Messages[0]
	rc, err := st.CreateBranch(ctx(t), store.CreateBranchInput{System: text("other"), RequestID: "create"})
	if err != nil || !rc.Replayed || rc.Branch.ID != b || rc.Branch.Incarnation != created.Branch.Incarnation || len(rc.Messages) != 1 {
		t.Fatalf("repeated create after the delete = %+v, %v", rc, err)
	}
	same("CreateBranch system", rc.Messages[0], first)
	if _, err := st.GetBranch(ctx(t), b); !errors.Is(err, store.ErrBranchNotFound) {
		t.Errorf("a replayed create brought the deleted branch back: %v", err)
	}
}

// testDeleteRequestIDPerBranch: docs/design.md#branches: a request id is
// remembered per branch, so reusing one to delete another branch deletes
// that branch (it does not answer with the first branch's response).
func testDeleteRequestIDPerBranch(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	a, b := newBranch(t, st), newBranch(t, st)
	ra, err := st.DeleteBranch(ctx(t), a, store.WriteOptions{RequestID: "del"})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := st.DeleteBranch(ctx(t), b, store.WriteOptions{RequestID: "del"})
	if err != nil || rb.Replayed || rb.BranchID != b {
		t.Errorf("delete of another branch under the same request id = %+v, %v", rb, err)
	}
	if _, err := st.GetBranch(ctx(t), b); !errors.Is(err, store.ErrBranchNotFound) {
		t.Errorf("the second branch was not deleted: %v", err)
	}
	again, err := st.DeleteBranch(ctx(t), a, store.WriteOptions{RequestID: "del"})
	if err != nil || !again.Replayed || again.BranchID != a || again.LastSequence != ra.LastSequence {
		t.Errorf("repeated delete of the first branch = %+v, %v", again, err)
	}
	if r, ok, err := st.Recall(ctx(t), "", &b, store.OpDeleteBranch, "del"); err != nil || !ok || r.(store.DeleteResult).BranchID != b {
		t.Errorf("Recall(second branch, DeleteBranch) = %v, %v, %v", r, ok, err)
	}
}

// testRequestIDsWithinBudget: the memory budget bounds what the store
// holds, the responses it remembers for request ids included (review B1):
// creating a branch with a 1 MiB system under a request id and deleting
// it, or adding a 1 MiB message under a request id and clearing it, over
// and over, may be refused with ErrMemoryBudget but never makes the heap
// grow much beyond the budget.
func testRequestIDsWithinBudget(t *testing.T, newStore Factory) {
	const (
		budget = 16 << 20
		rounds = 100
	)
	// Each round's text is a new allocation, as a request decoded off the wire is.
	big := func(i int) string { return strings.Repeat("x", 1<<20) + fmt.Sprint(i) }
	for _, tc := range []struct {
		name  string
		round func(t *testing.T, st store.Store, b *branchRef, i int) error
	}{
		{"create and delete", func(t *testing.T, st store.Store, _ *branchRef, i int) error {
			res, err := st.CreateBranch(ctx(t), store.CreateBranchInput{System: text(big(i)), RequestID: fmt.Sprint("create-", i)})
			if err != nil {
				return err
			}
			_, err = st.DeleteBranch(ctx(t), res.Branch.ID, store.WriteOptions{RequestID: fmt.Sprint("delete-", i)})
			return err
		}},
		{"add and clear", func(t *testing.T, st store.Store, b *branchRef, i int) error {
			if _, err := st.AddMessage(ctx(t), b.id(t, st), store.AddInput{Factory: store.Factory{Instruction: text(big(i))}},
				store.WriteOptions{RequestID: fmt.Sprint("add-", i)}); err != nil {
				return err
			}
			_, err := st.ClearMessages(ctx(t), b.id(t, st), store.WriteOptions{})
			return err
		}},
		{"add and push out of the log", func(t *testing.T, st store.Store, b *branchRef, i int) error {
			if _, err := st.AddMessage(ctx(t), b.id(t, st), store.AddInput{Factory: store.Factory{System: text(big(i))}},
				store.WriteOptions{RequestID: fmt.Sprint("system-", i)}); err != nil {
				return err
			}
			_, err := st.SetProgression(ctx(t), b.id(t, st), nil, store.WriteOptions{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t, Options{MemoryBudget: budget, EventRetention: 1})
			before := heapInUse()
			var b branchRef
			done := 0
			for i := range rounds {
				err := tc.round(t, st, &b, i)
				if errors.Is(err, store.ErrMemoryBudget) {
					continue
				}
				if err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				done++
			}
			grown := heapInUse() - before
			runtime.KeepAlive(st)
			if done == 0 {
				t.Fatal("every round was refused")
			}
			if grown > 2*budget {
				t.Errorf("after %d of %d rounds the heap grew by %d MiB, over a budget of %d MiB", done, rounds, grown>>20, budget>>20)
			}
		})
	}
}

// branchRef is a branch made on first use.
type branchRef struct{ made *store.BranchResult }

func (r *branchRef) id(t *testing.T, st store.Store) uuid.UUID {
	t.Helper()
	if r.made == nil {
		res, err := st.CreateBranch(ctx(t), store.CreateBranchInput{})
		if err != nil {
			t.Fatal(err)
		}
		r.made = &res
	}
	return r.made.Branch.ID
}

// heapInUse returns the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
