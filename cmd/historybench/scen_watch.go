package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// watchWriters is how many writers add to the watched branch at once, as in the throughput row.
const watchWriters = 50

// catchUpTimeout bounds how long the watchers may take to receive every event after the writes.
const catchUpTimeout = 2 * time.Minute

// benchWatch measures AddMessage throughput on one branch with cfg.Watchers watchers over the same
// without any (issue 8: reported, with every event delivered). Each watcher is a client of its own
// (its own connection) running the client package's Watch, which resumes after an eviction; it
// checks that it receives every event exactly once and in order. After the writes the bench waits
// for every watcher to reach the head, then deletes the branch, whose BRANCH_DELETED event ends
// each watch; a watcher that missed an event fails the run.
func benchWatch(ctx context.Context, b *bench, h *historyd) ([]row, error) {
	watchers := make([]*client.Client, b.cfg.Watchers)
	for i := range watchers {
		c, err := client.Dial(h.Addr, client.WithInsecure(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		watchers[i] = c
	}
	without := func() (measured, error) {
		ids, err := createBranches(ctx, h, 1)
		if err != nil {
			return measured{}, err
		}
		defer deleteBranches(ctx, h, ids)
		return measure(ctx, h, watchWriters, b.cfg.Duration, func(ctx context.Context, _, i int) (int, error) {
			_, err := h.Client.History.AddMessage(ctx, addRequest(ids[0], i))
			return 1, err
		})
	}
	if _, err := without(); err != nil { // warm-up
		return nil, err
	}
	var ratios, withRates, withoutRates, catchUps, withCPU, withoutCPU []float64
	resumes, events := 0, 0
	for run := range b.cfg.Runs {
		var w watchRun
		var plain measured
		var err error
		if run%2 == 0 {
			if w, err = watchedWrites(ctx, b, h, watchers); err == nil {
				plain, err = without()
			}
		} else {
			if plain, err = without(); err == nil {
				w, err = watchedWrites(ctx, b, h, watchers)
			}
		}
		if err != nil {
			return nil, err
		}
		ratios = append(ratios, w.perSecond/plain.PerSecond)
		withRates, withoutRates = append(withRates, w.perSecond), append(withoutRates, plain.PerSecond)
		withCPU, withoutCPU = append(withCPU, w.serverCPU), append(withoutCPU, plain.ServerCPU)
		catchUps = append(catchUps, float64(w.catchUp)/float64(time.Millisecond))
		resumes += w.resumes
		events += w.events
		b.progress("watch run %d: %.0f/s with %d watchers, %.0f/s without (server CPU %.0f µs / %.0f µs a write, load generator with its watchers %.0f µs / %.0f µs); %d events to each, %d resumes, caught up %v after the writes",
			run+1, w.perSecond, len(watchers), plain.PerSecond, w.serverCPU, plain.ServerCPU, w.clientCPU, plain.ClientCPU, w.events, w.resumes, w.catchUp.Round(time.Millisecond))
	}
	target, meets := atLeast(0.5) // issue 21: "with 100 watchers asking for batches >= 0.5x with none"
	return []row{{
		Target: target, meets: meets,
		Name: fmt.Sprintf("AddMessage throughput with %d watchers asking for batches / with none", len(watchers)),
		Unit: "ratio",
		Runs: ratios,
		Detail: fmt.Sprintf("%.0f/s / %.0f/s; server CPU a write, its fan-out included, %.0f µs / %.0f µs; every event delivered to every watcher (%d events × %d watchers over the runs), %d resumes after eviction, caught up %.0f ms after the writes",
			summarize(withRates).Median, summarize(withoutRates).Median, summarize(withCPU).Median, summarize(withoutCPU).Median,
			events, len(watchers), resumes, summarize(catchUps).Median),
		Note: fmt.Sprintf("%d writers on one branch, 1 KB instructions; each watcher its own connection, the client package's resuming Watch", watchWriters),
	}}, nil
}

// watchRun is one run of writes under watch.
type watchRun struct {
	perSecond float64       // AddMessage calls per second
	serverCPU float64       // the server's CPU time per write, from the writes' start to the catch-up, in µs
	clientCPU float64       // the bench process's (writers' and watchers') CPU time per write, the same span, in µs
	events    int           // events each watcher received (all of them)
	resumes   int           // resumptions, all watchers together
	catchUp   time.Duration // from the end of the writes until every watcher had the head
}

// watchedWrites runs the writers on a fresh branch that every watcher watches from its start.
func watchedWrites(ctx context.Context, b *bench, h *historyd, watchers []*client.Client) (watchRun, error) {
	ids, err := createBranches(ctx, h, 1)
	if err != nil {
		return watchRun{}, err
	}
	branch := ids[0]
	st := &watchState{last: make([]uint64, len(watchers))}
	st.cond = sync.NewCond(&st.mu)
	wctx, cancel := context.WithTimeout(ctx, b.cfg.Duration+catchUpTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.watch(wctx, c, branch, i)
		}()
	}
	defer wg.Wait()
	defer cancel()
	// Every watcher has its first event (BRANCH_CREATED) before the writes start.
	if err := st.waitAll(wctx, 1); err != nil {
		return watchRun{}, err
	}
	cpu0, err := h.CPUTime()
	if err != nil {
		return watchRun{}, err
	}
	self0, err := cpuTimeOf(os.Getpid())
	if err != nil {
		return watchRun{}, err
	}
	r, err := closedLoop(ctx, watchWriters, b.cfg.Duration, func(ctx context.Context, _, i int) (int, error) {
		_, err := h.Client.History.AddMessage(ctx, addRequest(branch, i))
		return 1, err
	})
	if err != nil {
		return watchRun{}, err
	}
	done := time.Now()
	resp, err := h.Client.History.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: branch})
	if err != nil {
		return watchRun{}, err
	}
	head := resp.GetBranch().GetHeadSequence()
	if err := st.waitAll(wctx, head); err != nil {
		return watchRun{}, fmt.Errorf("not every event reached every watcher: %w", err)
	}
	catchUp := time.Since(done)
	cpu1, err := h.CPUTime()
	if err != nil {
		return watchRun{}, err
	}
	self1, err := cpuTimeOf(os.Getpid())
	if err != nil {
		return watchRun{}, err
	}
	deleteBranches(ctx, h, ids) // ends every watch after its BRANCH_DELETED commit
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return watchRun{}, st.err
	}
	for i, last := range st.last {
		if last != head+1 {
			return watchRun{}, fmt.Errorf("watcher %d ended at sequence %d, want %d (the deletion)", i, last, head+1)
		}
	}
	return watchRun{perSecond: r.PerSecond(), serverCPU: micros(cpu1-cpu0) / float64(r.Ops), clientCPU: micros(self1-self0) / float64(r.Ops),
		events: int(head + 1), resumes: st.resumes, catchUp: catchUp}, nil
}

// watchState is what the watchers of one run have received.
type watchState struct {
	mu      sync.Mutex
	cond    *sync.Cond
	last    []uint64 // per watcher, the last sequence received
	resumes int
	err     error // the first watcher failure
}

// watch runs watcher i until its watch ends, checking every event's sequence.
func (st *watchState) watch(ctx context.Context, c *client.Client, branch string, i int) {
	onResume := client.OnResume(func(client.Resume) {
		st.mu.Lock()
		st.resumes++
		st.mu.Unlock()
	})
	// batch_commits (issue 21): a watcher behind gets the commits it is behind on several to a frame.
	req := &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0), BatchCommits: true}
	for commit, err := range c.Watch(ctx, req, onResume) {
		st.mu.Lock()
		if err == nil {
			for _, ev := range commit.GetEvents() {
				if ev.GetSequence() != st.last[i]+1 && st.err == nil {
					err = fmt.Errorf("watcher %d got sequence %d after %d", i, ev.GetSequence(), st.last[i])
				}
				st.last[i] = ev.GetSequence()
			}
		}
		if err != nil && st.err == nil {
			st.err = fmt.Errorf("watcher %d: %w", i, err)
		}
		st.cond.Broadcast()
		st.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// waitAll waits until every watcher has received sequence seq, a watcher failed, or ctx ends.
func (st *watchState) waitAll(ctx context.Context, seq uint64) error {
	return st.waitFor(ctx, func(int) uint64 { return seq })
}

// waitFor waits until every watcher i has received sequence want(i), a watcher failed, or ctx
// ends (the PostgreSQL rows' watchers watch branches of different heads).
func (st *watchState) waitFor(ctx context.Context, want func(i int) uint64) error {
	stop := context.AfterFunc(ctx, func() {
		st.mu.Lock()
		st.cond.Broadcast()
		st.mu.Unlock()
	})
	defer stop()
	st.mu.Lock()
	defer st.mu.Unlock()
	for {
		if st.err != nil {
			return st.err
		}
		behind := 0
		for i, last := range st.last {
			if last < want(i) {
				behind++
			}
		}
		if behind == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d watchers short of their sequences: %w", behind, ctx.Err())
		}
		st.cond.Wait()
	}
}
