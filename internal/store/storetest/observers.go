package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// testObservers: ADR-0006 D4 / docs/design.md#observers: observers run after
// the insert is committed, over a snapshot of the list taken for that add
// (one added during the call applies from the next add); a failure (or a
// panic) does not stop the others; all failures come back joined with the
// committed message; removal works.
func testObservers(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	var (
		mu  sync.Mutex
		log []string
	)
	record := func(name string) store.Observer {
		return func(ctx context.Context, branch uuid.UUID, m *envelope.Message) error {
			// The write is committed when the observer runs.
			if _, err := st.GetMessage(ctx, branch, m.ID); err != nil {
				t.Errorf("observer %s: message not committed yet: %v", name, err)
			}
			mu.Lock()
			log = append(log, name)
			mu.Unlock()
			return nil
		}
	}
	errA, errB := errors.New("a failed"), errors.New("b failed")
	var removeLate func()
	if _, err := st.Observe(b, record("h1")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Observe(b, func(context.Context, uuid.UUID, *envelope.Message) error { return errA }); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Observe(b, func(context.Context, uuid.UUID, *envelope.Message) error { panic("boom") }); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Observe(b, func(ctx context.Context, branch uuid.UUID, m *envelope.Message) error {
		if removeLate == nil {
			var err error
			if removeLate, err = st.Observe(branch, record("late")); err != nil {
				t.Error(err)
			}
		}
		return errB
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Observe(b, record("h3")); err != nil {
		t.Fatal(err)
	}

	res, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("x")}}, store.WriteOptions{})
	if res.Message.Message == nil {
		t.Fatalf("the committed message was not returned with the observer errors (%v)", err)
	}
	var oe *store.ObserverError
	if !errors.As(err, &oe) || len(oe.Errs) != 3 || !errors.Is(err, errA) || !errors.Is(err, errB) || !errors.Is(err, store.ErrObserver) {
		t.Fatalf("observer error = %v, want errA, the panic and errB joined", err)
	}
	if got := order(t, st, b); len(got) != 1 || got[0] != res.Message.Message.ID {
		t.Errorf("the write was not kept after observer failures: %v", got)
	}
	mu.Lock()
	if len(log) != 2 || log[0] != "h1" || log[1] != "h3" {
		t.Errorf("observers ran %v, want [h1 h3] (late must wait for the next add)", log)
	}
	log = nil
	mu.Unlock()

	_, _ = st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("y")}}, store.WriteOptions{})
	mu.Lock()
	if len(log) != 3 || log[2] != "late" {
		t.Errorf("second add ran %v, want [h1 h3 late]", log)
	}
	log = nil
	mu.Unlock()
	removeLate()
	removeLate()
	_, _ = st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("z")}}, store.WriteOptions{})
	mu.Lock()
	if len(log) != 2 {
		t.Errorf("after removing late, observers ran %v", log)
	}
	mu.Unlock()

	// Writes that add no message (clear, progression) fire nothing.
	mu.Lock()
	log = nil
	mu.Unlock()
	if _, err := st.ClearMessages(ctx(t), b, store.WriteOptions{}); err != nil {
		t.Errorf("clear reported %v", err)
	}
	mu.Lock()
	if len(log) != 0 {
		t.Errorf("clear fired %v", log)
	}
	mu.Unlock()
}

// testObserversReentrant: ADR-0006 D4 "Re-entrant": an observer may add to
// the same branch without deadlocking; the nested add has its own
// snapshot (vector "async a_add_message hooks: re-entrant add").
func testObserversReentrant(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	var log []string
	if _, err := st.Observe(b, func(ctx context.Context, branch uuid.UUID, m *envelope.Message) error {
		s, _ := m.Content.(*envelope.InstructionContent).Instruction.Str()
		log = append(log, "outer:"+s)
		if s == "trigger" {
			_, err := st.AddMessage(ctx, branch, store.AddInput{Factory: store.Factory{Instruction: text("echo")}}, store.WriteOptions{})
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Observe(b, func(_ context.Context, _ uuid.UUID, m *envelope.Message) error {
		s, _ := m.Content.(*envelope.InstructionContent).Instruction.Str()
		log = append(log, "sync:"+s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text("trigger")}}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"outer:trigger", "outer:echo", "sync:echo", "sync:trigger"}
	if len(log) != len(want) {
		t.Fatalf("observer log %v, want %v", log, want)
	}
	for i := range want {
		if log[i] != want[i] {
			t.Fatalf("observer log %v, want %v", log, want)
		}
	}
	if n := len(order(t, st, b)); n != 2 {
		t.Errorf("%d messages, want 2", n)
	}
}
