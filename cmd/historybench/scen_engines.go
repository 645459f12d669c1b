package main

import (
	"context"
	"fmt"
	"time"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// engineConcurrency is the concurrency of the engine comparisons (issue 14: "at concurrency 50").
const engineConcurrency = 50

// addLoad is the AddMessage load of the throughput rows on h: engineConcurrency workers, each on a
// branch of its own, each sending one request built once (scen_throughput.go says why). run
// creates the branches, measures for d, and deletes them.
func addLoad(ctx context.Context, h *historyd, d time.Duration) func() (measured, error) {
	return func() (measured, error) {
		branches, err := createBranches(ctx, h, engineConcurrency)
		if err != nil {
			return measured{}, err
		}
		defer deleteBranches(ctx, h, branches)
		reqs := make([]*historyv1.AddMessageRequest, len(branches))
		for w, branch := range branches {
			reqs[w] = addRequest(branch, w)
		}
		return measure(ctx, h, engineConcurrency, d, func(ctx context.Context, w, _ int) (int, error) {
			_, err := h.Client.History.AddMessage(ctx, reqs[w])
			return 1, err
		})
	}
}

// alternate runs x and y b.cfg.Runs times, x first in even runs and y first in odd ones, after one
// warm-up of each, and returns their measurements in run order.
func alternate(b *bench, name string, x, y func() (measured, error)) (xs, ys []measured, err error) {
	if _, err := x(); err != nil { // warm-up: connections, goroutines, caches
		return nil, nil, err
	}
	if _, err := y(); err != nil {
		return nil, nil, err
	}
	return alternateRuns(b, name, x, y)
}

// alternateRuns is alternate without the warm-up, for loads that warm up in every run.
func alternateRuns(b *bench, name string, x, y func() (measured, error)) (xs, ys []measured, err error) {
	for run := range b.cfg.Runs {
		var mx, my measured
		if run%2 == 0 {
			if mx, err = x(); err == nil {
				my, err = y()
			}
		} else {
			if my, err = y(); err == nil {
				mx, err = x()
			}
		}
		if err != nil {
			return nil, nil, err
		}
		xs, ys = append(xs, mx), append(ys, my)
		b.progress("%s run %d: %.0f over %.0f = %.2f", name, run+1, mx.PerSecond, my.PerSecond, mx.PerSecond/my.PerSecond)
	}
	return xs, ys, nil
}

// ratios returns the per-run ratios of xs over ys and the medians of the rates and of the server
// CPU per call.
func ratios(xs, ys []measured) (rs []float64, x, y, xCPU, yCPU float64) {
	for i := range xs {
		rs = append(rs, xs[i].PerSecond/ys[i].PerSecond)
	}
	rate := func(m measured) float64 { return m.PerSecond }
	server := func(m measured) float64 { return m.ServerCPU }
	return rs, medianOf(xs, rate), medianOf(ys, rate), medianOf(xs, server), medianOf(ys, server)
}

// medianOf is the median over runs of one figure of each measurement.
func medianOf(ms []measured, figure func(measured) float64) float64 {
	v := make([]float64, len(ms))
	for i, m := range ms {
		v[i] = figure(m)
	}
	return summarize(v).Median
}

// benchSQLiteVsMemory measures AddMessage throughput at concurrency 50 on a sqlite-engine historyd
// with --sync=normal over the same on a memory-engine historyd (issue 14: target at least 0.7):
// two processes, both running, the loads alternating which goes first. It returns the sqlite
// server, still running, for the ListMessages row on that engine.
func benchSQLiteVsMemory(ctx context.Context, b *bench) ([]row, *sqliteServer, error) {
	mem, err := startHistoryd(ctx, b.bin, b.memoryFlags()...)
	if err != nil {
		return nil, nil, err
	}
	defer mem.stop()
	sq, err := b.startSQLite(ctx, "normal")
	if err != nil {
		return nil, nil, err
	}
	xs, ys, err := alternate(b, "AddMessage/s, sqlite normal over memory, c=50,", addLoad(ctx, sq.historyd, b.cfg.Duration), addLoad(ctx, mem, b.cfg.Duration))
	if err != nil {
		_ = sq.stop()
		return nil, nil, err
	}
	rs, x, y, xc, yc := ratios(xs, ys)
	r := row{
		Name:   "AddMessage throughput, sqlite --sync=normal / memory engine, concurrency 50",
		Unit:   "ratio",
		Runs:   rs,
		Detail: fmt.Sprintf("sqlite %.0f/s, memory %.0f/s; server CPU a call %.0f µs / %.0f µs", x, y, xc, yc),
		Note:   "two historyd processes, 1 KB instruction, a branch per worker, one connection each",
	}
	r.Target, r.meets = atLeast(0.7)
	if r.Met() == "NO" && b.cfg.Profile {
		r.Profile, err = b.cpuProfile(ctx, sq.historyd, func(context.Context) error {
			_, err := addLoad(ctx, sq.historyd, b.profileDuration())()
			return err
		})
		if err != nil {
			_ = sq.stop()
			return nil, nil, err
		}
	}
	return []row{r}, sq, nil
}
