package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// observerEntry is one registered observer.
type observerEntry struct {
	id uint64
	fn Observer
}

// Observers is a branch's message-added observers as the durable engines
// keep them, under the lock of their branch's handle: each is added under
// a key that its remover names.
type Observers struct {
	list []observerEntry
	last uint64 // the last key given
}

// Add adds o and returns its key.
func (l *Observers) Add(o Observer) uint64 {
	l.last++
	l.list = append(l.list, observerEntry{id: l.last, fn: o})
	return l.last
}

// Remove removes the observer added under key; removing twice is
// harmless.
func (l *Observers) Remove(key uint64) {
	for i, e := range l.list {
		if e.id == key {
			l.list = append(l.list[:i:i], l.list[i+1:]...)
			break
		}
	}
}

// Len is how many observers there are.
func (l *Observers) Len() int { return len(l.list) }

// Snapshot copies the observers for one write (ADR-0006 D4 "Snapshot
// isolation"): one added or removed while they run applies from the next.
func (l *Observers) Snapshot() []Observer {
	out := make([]Observer, len(l.list))
	for i, e := range l.list {
		out[i] = e.fn
	}
	return out
}

// Observe adds a message-added observer to a branch (Store.Observe). The
// returned function removes it; removing twice is harmless. An observer
// added or removed while observers run applies from the next write
// (ADR-0006 D4 "Snapshot isolation").
func (m *Memory) Observe(branchID uuid.UUID, o Observer) (func(), error) {
	if o == nil {
		return nil, fieldErr("observer", envelope.ErrInvalid, "observer is nil")
	}
	b, err := m.writeLocked(branchID)
	if err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	b.nextObs++
	id := b.nextObs
	b.observers = append(b.observers, observerEntry{id: id, fn: o})
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.observers = slices.DeleteFunc(b.observers, func(e observerEntry) bool { return e.id == id })
	}, nil
}

// snapshotObservers copies the branch's observer list for one write
// (branch lock held).
func (b *branch) snapshotObservers() []observerEntry {
	if len(b.observers) == 0 {
		return nil
	}
	return slices.Clone(b.observers)
}

// notify runs every observer of the snapshot on msg, after the write was
// committed and the branch lock released (ADR-0006 D4): a failure (or a
// panic) does not stop the others, and all failures come back as one
// *ObserverError; nil when all succeeded.
func notify(ctx context.Context, branchID uuid.UUID, snapshot []observerEntry, msg *envelope.Message) error {
	var errs []error
	for _, o := range snapshot {
		if err := callObserver(ctx, branchID, o.fn, msg); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &ObserverError{Errs: errs}
}

// callObserver calls one observer, turning a panic into its error (LionAGI
// collects every BaseException a callback raises).
func callObserver(ctx context.Context, branchID uuid.UUID, fn Observer, msg *envelope.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("observer panicked: %v", p)
		}
	}()
	return fn(ctx, branchID, msg)
}
