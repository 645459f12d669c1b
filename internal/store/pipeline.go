package store

import (
	"context"

	"github.com/google/uuid"
)

// Pipeliner is implemented by the engines that take AddMessage calls in
// order without waiting for each to be applied (issue 21, AppendMessages):
// AddMessageAsync queues the write and returns at once; wait returns its
// result once it is as durable as AddMessage's would be. Writes queued one
// after another by one goroutine apply in the order queued, so a stream's
// items on one branch apply in the order sent, and an engine with group
// commit may commit a whole window at once (the sqlite engine: one fsync
// for the window, not one per item).
//
// wait must be called exactly once; a caller that gives up on ctx still
// calls it (the write, once queued, is not abandoned).
type Pipeliner interface {
	AddMessageAsync(ctx context.Context, branch uuid.UUID, in AddInput, opts WriteOptions) (wait func() (WriteResult, error))
}

// AppliedPipeliner is a Pipeliner whose AddMessageAsync applies the write in
// the call, so the wait it returns never blocks: a caller may gather the
// results of the writes queued so far and act on them together (the
// AppendMessages stream sends their answers in one handoff) without holding
// one behind a write still in progress.
type AppliedPipeliner interface {
	Pipeliner
	// AppliesInCall marks the engine; it does nothing.
	AppliesInCall()
}

var _ AppliedPipeliner = (*Memory)(nil)

// AppliesInCall marks Memory as an AppliedPipeliner.
func (m *Memory) AppliesInCall() {}

// AddMessageAsync is AddMessage (Pipeliner): the memory engine applies a
// write in the call, so queueing it is doing it, and order holds trivially.
func (m *Memory) AddMessageAsync(ctx context.Context, branch uuid.UUID, in AddInput, opts WriteOptions) func() (WriteResult, error) {
	res, err := m.AddMessage(ctx, branch, in, opts)
	return func() (WriteResult, error) { return res, err }
}
