package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// pgWatchLatencyName and pgWatchersRowName name issue 16's watch rows.
const pgWatchLatencyName = "Watch delivery latency across replicas (AddMessage on A to the event on B), PostgreSQL engine,"

func pgWatchersRowName(watchers int) string {
	return fmt.Sprintf("AddMessage throughput on replica A with %d watchers on replica B / with none, PostgreSQL engine", watchers)
}

// deliveryTimeout bounds how long one event may take from A to a watcher on B before the run
// fails: far above any wake-up, far below "lost".
const deliveryTimeout = 10 * time.Second

// benchPGWatch measures, on two historyd replicas A and B serving one schema (issue 16: "Watch
// delivery latency across replicas (p50, p99), and AddMessage throughput with 0 and with 100
// watchers on other replicas"; figures reported, no target):
//
//   - delivery latency: one writer on A adds a message, one watcher on B waits for its event, and
//     the time from the call on A to the event on B is a sample; the next write waits for it, so
//     every sample starts from an idle branch (the wake-up is measured, not a queue);
//   - throughput: engineConcurrency writers on A, a branch each, with cfg.Watchers watchers on B
//     spread over those branches, each its own connection, over the same with none; every watcher
//     must receive every event of its branch in order and end at the branch's deletion.
//
// Each replica has a pool of -postgres-replica-conns.
func benchPGWatch(ctx context.Context, b *bench, e *pgEnv) ([]row, error) {
	schema, drop, err := b.newSchema(ctx, e)
	if err != nil {
		return nil, err
	}
	defer drop()
	conns := b.cfg.PostgresReplicaConns
	a, err := b.startPostgres(ctx, e, schema, conns)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	// B starts after A has migrated the schema; replicas starting together are the e2e test's.
	bb, err := b.startPostgres(ctx, e, schema, conns)
	if err != nil {
		return nil, err
	}
	defer bb.stop()
	rows, err := deliveryLatency(ctx, b, a, bb)
	if err != nil {
		return nil, err
	}
	r, err := watchersOnOtherReplica(ctx, b, a, bb)
	if err != nil {
		return nil, err
	}
	return append(rows, r), nil
}

// deliveryLatency is the latency part of benchPGWatch: the p50 and p99 rows.
func deliveryLatency(ctx context.Context, b *bench, a, bb *pgServer) ([]row, error) {
	one := func() (p50, p99, write time.Duration, n int, err error) {
		ids, err := createBranches(ctx, a.historyd, 1)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		defer deleteBranches(ctx, a.historyd, ids)
		lat, writes, err := pingPong(ctx, a, bb, ids[0], b.cfg.Duration)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		return percentile(lat, 50), percentile(lat, 99), percentile(writes, 50), len(lat), nil
	}
	if _, _, _, _, err := one(); err != nil { // warm-up
		return nil, err
	}
	var p50s, p99s, writes []float64
	samples := 0
	for run := range b.cfg.Runs {
		p50, p99, w, n, err := one()
		if err != nil {
			return nil, err
		}
		p50s, p99s, writes = append(p50s, ms(p50)), append(p99s, ms(p99)), append(writes, ms(w))
		samples += n
		b.progress("watch across replicas run %d: delivery p50 %.1f ms, p99 %.1f ms (AddMessage p50 %.1f ms, %d samples)",
			run+1, ms(p50), ms(p99), ms(w), n)
	}
	detail := fmt.Sprintf("%d samples over the runs; AddMessage on A alone p50 %.1f ms", samples, summarize(writes).Median)
	note := fmt.Sprintf("two historyd on one schema, `--postgres-max-conns %d` each; one writer on A, one watcher on B, "+
		"each write waiting for the previous one's event on B; from the AddMessage call on A to the event's arrival at B's watcher", b.cfg.PostgresReplicaConns)
	return []row{
		{Name: pgWatchLatencyName + " p50", Unit: "ms", Runs: p50s, Detail: detail, Note: note},
		{Name: pgWatchLatencyName + " p99", Unit: "ms", Runs: p99s, Detail: detail},
	}, nil
}

// arrival is an event's sequence and when the watcher received it.
type arrival struct {
	seq uint64
	at  time.Time
}

// pingPong writes to branch on a for d, one message at a time, each after the previous one's
// event reached a watcher on bb; it returns the delivery latencies and the AddMessage latencies.
func pingPong(ctx context.Context, a, bb *pgServer, branch string, d time.Duration) (lat, writes []time.Duration, err error) {
	wctx, cancel := context.WithCancel(ctx)
	arrivals := make(chan arrival, 16)
	watchErr := make(chan error, 1)
	go func() { // owned by this call: it ends when wctx is cancelled or the watch ends
		watchErr <- func() error {
			req := &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0)}
			for commit, err := range bb.Client.Watch(wctx, req) {
				if err != nil {
					return err
				}
				at := time.Now()
				for _, ev := range commit.GetEvents() {
					select {
					case arrivals <- arrival{ev.GetSequence(), at}:
					case <-wctx.Done():
						return nil
					}
				}
			}
			return nil
		}()
	}()
	defer func() {
		cancel()
		if werr := <-watchErr; err == nil && werr != nil && !errors.Is(werr, context.Canceled) {
			err = fmt.Errorf("watch on B: %w", werr)
		}
	}()
	// await returns the arrival of seq, failing on a gap: events come in order, each once.
	next := uint64(1)
	await := func(seq uint64) (time.Time, error) {
		timer := time.NewTimer(deliveryTimeout)
		defer timer.Stop()
		for {
			select {
			case got := <-arrivals:
				if got.seq != next {
					return time.Time{}, fmt.Errorf("watch on B: sequence %d, want %d", got.seq, next)
				}
				next++
				if got.seq == seq {
					return got.at, nil
				}
			case err := <-watchErr:
				watchErr <- err // for the deferred check
				return time.Time{}, fmt.Errorf("watch on B ended waiting for sequence %d: %v", seq, err)
			case <-timer.C:
				return time.Time{}, fmt.Errorf("sequence %d written on A did not reach B's watcher within %v", seq, deliveryTimeout)
			}
		}
	}
	if _, err := await(1); err != nil { // BRANCH_CREATED: the watch is open
		return nil, nil, err
	}
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		t0 := time.Now()
		resp, err := a.Client.History.AddMessage(ctx, addRequest(branch, i))
		if err != nil {
			return nil, nil, err
		}
		writes = append(writes, time.Since(t0))
		at, err := await(resp.GetHeadSequence())
		if err != nil {
			return nil, nil, err
		}
		lat = append(lat, at.Sub(t0))
	}
	return lat, writes, nil
}

// watchersOnOtherReplica is the throughput part of benchPGWatch.
func watchersOnOtherReplica(ctx context.Context, b *bench, a, bb *pgServer) (row, error) {
	watchers := make([]*client.Client, b.cfg.Watchers)
	for i := range watchers {
		c, err := client.Dial(bb.Addr, client.WithInsecure(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
		if err != nil {
			return row{}, err
		}
		defer c.Close()
		watchers[i] = c
	}
	without := addLoad(ctx, a.historyd, b.cfg.Duration)
	with := func() (measured, error) { return watchedOnB(ctx, b, a, bb, watchers) }
	xs, ys, err := alternate(b, fmt.Sprintf("AddMessage/s on A with %d watchers on B over none, c=50,", len(watchers)), with, without)
	if err != nil {
		return row{}, err
	}
	rs, x, y, xc, yc := ratios(xs, ys)
	var catchUps, bCPU []float64
	for _, m := range xs {
		catchUps, bCPU = append(catchUps, m.CatchUp), append(bCPU, m.OtherCPU)
	}
	return row{
		Name: pgWatchersRowName(len(watchers)), Unit: "ratio", Runs: rs,
		Detail: fmt.Sprintf("%.0f/s / %.0f/s; A's CPU a write %.0f µs / %.0f µs, B's %.0f µs a write with the watchers; every event delivered to every watcher, caught up %.0f ms after the writes",
			x, y, xc, yc, summarize(bCPU).Median, summarize(catchUps).Median),
		Note: fmt.Sprintf("two historyd on one schema, `--postgres-max-conns %d` each; %d writers on A, a branch each, 1 KB instructions; "+
			"the watchers on B spread over the branches being written (%d a branch), each its own connection, the client package's resuming Watch; issue 16 names no target",
			b.cfg.PostgresReplicaConns, engineConcurrency, max(len(watchers)/engineConcurrency, 1)),
	}, nil
}

// watchedOnB is one run of writes on A under watch on B; it returns A's measurement with the
// catch-up time and B's CPU a write.
func watchedOnB(ctx context.Context, b *bench, a, bb *pgServer, watchers []*client.Client) (measured, error) {
	branches, err := createBranches(ctx, a.historyd, engineConcurrency)
	if err != nil {
		return measured{}, err
	}
	deleted := false
	defer func() {
		if !deleted {
			deleteBranches(ctx, a.historyd, branches)
		}
	}()
	st := &watchState{last: make([]uint64, len(watchers))}
	st.cond = sync.NewCond(&st.mu)
	wctx, cancel := context.WithTimeout(ctx, b.cfg.Duration+catchUpTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.watch(wctx, c, branches[i%len(branches)], i)
		}()
	}
	defer wg.Wait()
	defer cancel()
	if err := st.waitAll(wctx, 1); err != nil { // every watch open on B: BRANCH_CREATED
		return measured{}, err
	}
	cpu0, err := bb.CPUTime()
	if err != nil {
		return measured{}, err
	}
	reqs := make([]*historyv1.AddMessageRequest, len(branches))
	for w, branch := range branches {
		reqs[w] = addRequest(branch, w)
	}
	m, err := measure(ctx, a.historyd, engineConcurrency, b.cfg.Duration, func(ctx context.Context, w, _ int) (int, error) {
		_, err := a.Client.History.AddMessage(ctx, reqs[w])
		return 1, err
	})
	if err != nil {
		return measured{}, err
	}
	done := time.Now()
	heads := make([]uint64, len(branches))
	var writes uint64
	for i, id := range branches {
		resp, err := a.Client.History.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: id})
		if err != nil {
			return measured{}, err
		}
		heads[i] = resp.GetBranch().GetHeadSequence()
		writes += heads[i] - 1 // BRANCH_CREATED is the first
	}
	if err := st.waitFor(wctx, func(i int) uint64 { return heads[i%len(heads)] }); err != nil {
		return measured{}, fmt.Errorf("not every event reached every watcher on B: %w", err)
	}
	m.CatchUp = ms(time.Since(done))
	cpu1, err := bb.CPUTime()
	if err != nil {
		return measured{}, err
	}
	m.OtherCPU = micros(cpu1-cpu0) / float64(writes)
	deleted = true
	deleteBranches(ctx, a.historyd, branches) // ends every watch after its BRANCH_DELETED commit
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return measured{}, st.err
	}
	for i, last := range st.last {
		if want := heads[i%len(heads)] + 1; last != want {
			return measured{}, fmt.Errorf("watcher %d on B ended at sequence %d, want %d (the deletion)", i, last, want)
		}
	}
	return m, nil
}
