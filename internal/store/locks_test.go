package store

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// waitForPendingWriter returns once a writer waits for b's lock: a new
// reader is then refused (sync.RWMutex lets no reader in past a waiting
// writer).
func waitForPendingWriter(t *testing.T, b *branch) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for b.mu.TryRLock() {
		b.mu.RUnlock()
		if time.Now().After(deadline) {
			t.Fatal("no writer ever waited for the branch lock")
		}
		runtime.Gosched()
	}
}

// returnsWhileHeld runs call and fails the test unless it returns within a
// bound that only a call waiting for a lock the caller holds reaches.
func returnsWhileHeld(t *testing.T, what string, call func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s did not return: it waits for a lock held elsewhere", what)
	}
}

// TestDeleteBranchDoesNotStallOtherBranches (review M1): a DeleteBranch
// that waits for a long reader of its branch holds no store-wide lock, so
// calls on other branches go on.
func TestDeleteBranchDoesNotStallOtherBranches(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	victim, err := m.CreateBranch(ctx, CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.CreateBranch(ctx, CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.readLocked(victim.Branch.ID) // a long reader, such as ToChatMessages on a big branch
	if err != nil {
		t.Fatal(err)
	}
	deleted := make(chan error, 1)
	go func() {
		_, err := m.DeleteBranch(ctx, victim.Branch.ID, WriteOptions{RequestID: "d"})
		deleted <- err
	}()
	waitForPendingWriter(t, b)

	returnsWhileHeld(t, "GetBranch of another branch", func() error {
		_, err := m.GetBranch(ctx, other.Branch.ID)
		return err
	})
	returnsWhileHeld(t, "CreateBranch", func() error {
		_, err := m.CreateBranch(ctx, CreateBranchInput{RequestID: "c"})
		return err
	})
	b.mu.RUnlock()
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetBranch(ctx, victim.Branch.ID); err == nil {
		t.Error("the branch outlived its delete")
	}
}

// TestWriteReleasesTheLockOnPanic (review MINOR 8): a mutation that panics
// leaves its branch unlocked, so the branch is not stuck for good.
func TestWriteReleasesTheLockOnPanic(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	res, err := m.CreateBranch(ctx, CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the mutation's panic did not reach the caller")
			}
		}()
		_, _ = m.write(ctx, res.Branch.ID, OpAddMessage, WriteOptions{}, func(*branch) (written, error) { panic("boom") })
	}()
	b, err := m.lookup(res.Branch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !b.mu.TryLock() {
		t.Fatal("the branch is still locked after a mutation panicked")
	}
	b.mu.Unlock()
}

// TestWholeBranchWorkRunsUnlocked (review M3): ToChatMessages renders,
// ForkBranch clones and ExportBranch encodes after the branch lock is
// released: a write made meanwhile does not wait for them, and does not
// show in their result, which is the branch as it was when they read it.
func TestWholeBranchWorkRunsUnlocked(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(m *Memory, b uuid.UUID) (messages int, err error)
	}{
		{"ToChatMessages", func(m *Memory, b uuid.UUID) (int, error) {
			res, err := m.ToChatMessages(ctx, b, ChatInput{})
			return len(res.Entries), err
		}},
		{"ForkBranch", func(m *Memory, b uuid.UUID) (int, error) {
			res, err := m.ForkBranch(ctx, ForkInput{Source: b})
			return res.Branch.MessageCount, err
		}},
		{"ExportBranch", func(m *Memory, b uuid.UUID) (int, error) {
			exp, err := m.ExportBranch(ctx, b, ExportInput{Mode: envelope.ModeJSON})
			pile, _ := exp.Data.Get("messages")
			coll, _ := pile.Get("collections")
			return coll.Len(), err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMemory()
			res, err := m.CreateBranch(ctx, CreateBranchInput{System: jsonv.StringValue("S")})
			if err != nil {
				t.Fatal(err)
			}
			b := res.Branch.ID
			add := func() error {
				_, err := m.AddMessage(ctx, b, AddInput{Factory: Factory{Instruction: jsonv.StringValue("i")}}, WriteOptions{})
				return err
			}
			for range 3 {
				if err := add(); err != nil {
					t.Fatal(err)
				}
			}
			ran := false
			m.unlockedHook = func() {
				ran = true
				returnsWhileHeld(t, "AddMessage on the branch being read", add)
			}
			n, err := tc.call(m, b)
			if err != nil {
				t.Fatal(err)
			}
			if !ran {
				t.Fatal("the call never released the branch lock before its work")
			}
			if n != 4 {
				t.Errorf("the result holds %d messages, want the 4 there were when it read the branch", n)
			}
		})
	}
}
