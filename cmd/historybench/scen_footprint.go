package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// rssSampleEvery is how often the resident memory of a sqlite server is read while it stores.
const rssSampleEvery = 100 * time.Millisecond

// benchFootprint measures what storing costs the sqlite engine (issue 14), on a fresh sqlite
// server per run (cfg.FootprintRuns: one by default, since a run writes 200k messages through
// gRPC, a minute or more on 2 cores, and both figures vary little from run to run) with --sync=normal and the bench's cache settings, warmed up (500 writes, their
// branch deleted), then cfg.SQLiteMessages 1 KB instructions written over memoryBranches branches
// by engineConcurrency writers (the group commit batches them, so the fixture is written fast):
//
//   - resident memory: the highest VmRSS read while it stores (every rssSampleEvery) and at the end,
//     less VmRSS before; target at most the configured page caches (--sqlite-cache x
//     (--sqlite-readers + 1)) + 32 MiB, since the data is on disk and only the caches may grow
//     with it;
//   - disk: the server stopped (a graceful stop closes the database, which checkpoints the WAL into
//     the file), the bytes of the data directory's files over the messages stored; target at most
//     2.5 KB, the event log and the indexes included.
//
// memKB is the memory engine's resident KB per message (the memory row's median), to show in the
// detail what the same messages cost there.
func benchFootprint(ctx context.Context, b *bench, memKB float64) ([]row, error) {
	var growth, disk, heap []float64
	for run := range b.cfg.FootprintRuns {
		g, d, hp, err := footprintRun(ctx, b)
		if err != nil {
			return nil, err
		}
		growth, disk, heap = append(growth, g), append(disk, d), append(heap, hp)
		b.progress("sqlite footprint run %d: resident memory grew %.1f MiB (Go heap in use %.1f MiB), %.2f KB on disk per message",
			run+1, g, hp, d)
	}
	n, caches := b.cfg.SQLiteMessages, b.cfg.cacheBytes()
	bound := float64(caches)/(1<<20) + 32
	rss := row{
		Name:   fmt.Sprintf("sqlite resident memory growth storing %s 1 KB messages", count(n)),
		Unit:   "MiB",
		Runs:   growth,
		Detail: fmt.Sprintf("page caches %s (%s x %d readers, %s the writer) + 32 MiB; Go heap in use grew %.1f MiB", mib(caches), mib(b.cfg.SQLiteCache), b.cfg.SQLiteReaders, mib(b.cfg.writerCacheBytes()), summarize(heap).Median),
		Note: fmt.Sprintf("%d run(s) (-footprint-runs); the highest VmRSS while storing, less VmRSS before, fresh server per run, %d writers over %d branches",
			b.cfg.FootprintRuns, engineConcurrency, memoryBranches),
	}
	if memKB > 0 {
		rss.Note += fmt.Sprintf("; the memory engine holds the same messages in about %.0f MiB (%.2f KB/msg, the resident memory row)", memKB*float64(n)/1024, memKB)
	}
	rss.Target, rss.meets = atMost(bound)
	rss.Target = fmt.Sprintf("<= %.0f (caches + 32)", bound)
	dk := row{
		Name:   "sqlite disk bytes per stored 1 KB message, after a checkpoint",
		Unit:   "KB/msg",
		Runs:   disk,
		Detail: fmt.Sprintf("%.0f MiB for %s messages", summarize(disk).Median*float64(n)/1024, count(n)),
		Note:   "the same run(s); every file of the data directory after a graceful stop (historyd.db; the WAL is checkpointed into it), over the messages stored: rows, indexes and the retained event log (KB = 1024 bytes)",
	}
	dk.Target, dk.meets = atMost(2.5)
	return []row{rss, dk}, nil
}

// footprintRun is one run of benchFootprint: the resident memory growth and the Go heap's, in MiB,
// and the disk KB per message.
func footprintRun(ctx context.Context, b *bench) (growthMiB, diskKB, heapMiB float64, err error) {
	sq, err := b.startSQLite(ctx, "normal")
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		if sq != nil {
			_ = sq.stop()
		}
	}()
	warm, err := createBranches(ctx, sq.historyd, 1)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := forEach(ctx, memoryBranches, 500, func(ctx context.Context, i int) error {
		_, err := sq.Client.History.AddMessage(ctx, addRequest(warm[0], i))
		return err
	}); err != nil {
		return 0, 0, 0, err
	}
	deleteBranches(ctx, sq.historyd, warm)
	rss0, err := sq.RSS()
	if err != nil {
		return 0, 0, 0, err
	}
	heap0, err := heapInuse(ctx, sq.historyd)
	if err != nil {
		return 0, 0, 0, err
	}
	branches, err := createBranches(ctx, sq.historyd, memoryBranches)
	if err != nil {
		return 0, 0, 0, err
	}
	peak, stopSampling := sampleRSS(sq.historyd)
	err = forEach(ctx, engineConcurrency, b.cfg.SQLiteMessages, func(ctx context.Context, i int) error {
		_, err := sq.Client.History.AddMessage(ctx, addRequest(branches[i%memoryBranches], i))
		return err
	})
	stopSampling()
	if err != nil {
		return 0, 0, 0, err
	}
	rss1, err := sq.RSS()
	if err != nil {
		return 0, 0, 0, err
	}
	heap1, err := heapInuse(ctx, sq.historyd)
	if err != nil {
		return 0, 0, 0, err
	}
	top := max(*peak, rss1)
	if err := sq.historyd.stop(); err != nil {
		return 0, 0, 0, err
	}
	size, err := dirBytes(sq.Dir)
	if err != nil {
		return 0, 0, 0, err
	}
	n := float64(b.cfg.SQLiteMessages)
	return float64(top-rss0) / (1 << 20), float64(size) / n / 1024, float64(heap1-heap0) / (1 << 20), nil
}

// sampleRSS reads h's VmRSS every rssSampleEvery until stop is called; *peak is the highest read
// (valid after stop).
func sampleRSS(h *historyd) (peak *int64, stop func()) {
	peak = new(int64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(rssSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if n, err := h.RSS(); err == nil && n > *peak {
					*peak = n
				}
			}
		}
	}()
	return peak, func() { close(done); wg.Wait() }
}
