package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// op is one operation of a load worker: worker is the worker's number (0 to concurrency-1) and i
// counts that worker's operations. It returns how many units it did (messages delivered, say),
// usually 1.
type op func(ctx context.Context, worker, i int) (int, error)

// result is what a closed-loop run did.
type result struct {
	Ops     int64         // operations completed
	Units   int64         // the units they reported
	Elapsed time.Duration // from the start until the last operation ended
}

// PerSecond is units per second.
func (r result) PerSecond() float64 { return float64(r.Units) / r.Elapsed.Seconds() }

// closedLoop runs concurrency workers that each call fn back to back for d: a closed loop, so the
// offered load adapts to the server (what ghz does by default). Operations running at the end
// finish and count; the elapsed time includes them. The first error stops every worker and is
// returned.
func closedLoop(ctx context.Context, concurrency int, d time.Duration, fn op) (result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var ops, units atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				n, err := fn(ctx, w, i)
				if err != nil {
					cancel(fmt.Errorf("worker %d, operation %d: %w", w, i, err))
					return
				}
				ops.Add(1)
				units.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	r := result{Ops: ops.Load(), Units: units.Load(), Elapsed: time.Since(start)}
	if err := context.Cause(ctx); err != nil { // a worker failed, or the caller gave up
		return r, err
	}
	if r.Ops == 0 {
		return r, errors.New("no operation completed")
	}
	return r, nil
}

// forEach runs fn for i in [0, n) on concurrency workers and returns the first error.
func forEach(ctx context.Context, concurrency, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(concurrency, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}
