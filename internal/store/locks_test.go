package store

import (
	"context"
	"runtime"
	"testing"
	"time"
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

// returnsWhileHeld runs call and fails the test unless it returns while
// the test still holds a read lock (released after call returns, or after
// a bound that only a stalled call reaches).
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
		t.Errorf("%s waited for a branch it does not touch", what)
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
