package sqlite

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/historyd/historyd/internal/store"
)

// Checkpoints (issue 15: "checkpoint duration"). SQLite's auto-checkpoint
// runs inside the commit that takes the WAL past wal_autocheckpoint pages:
// its time cannot be told apart from the commit's. So the write connection
// turns it off (wal_autocheckpoint(0), db.go) and the writer checkpoints the
// WAL itself, between batches, once the batch has been answered. It runs on
// the writer goroutine, as the auto-checkpoint ran in a commit: the writes
// queued meanwhile wait for its copy and its fsync of the database (in
// their gRPC latency, not in write_transaction_seconds: checkpoint_seconds
// is that wait).
//
//   - passive, after a batch, once the batches have written about
//     checkpointPages pages to the WAL since the last one (SQLite's own
//     default): it copies what no reader still needs and does not wait for
//     the readers. A WAL fully copied is reused from its start by the next
//     commit that finds no reader on it;
//   - restarting, when a passive one finds restartPages or more in the WAL:
//     readers that never pause (one always on the WAL when a commit would
//     reuse it) starve the reuse, and the WAL then grows with the writes,
//     with SQLite's own auto-checkpoint too (TestWALBoundedUnderLoad, 3.2k
//     1 KB writes and two readers looping: 43 MB; 45-75 MB when a restart
//     ran at most once a second). It waits up to restartWaitMS for the
//     readers on the WAL to finish (new ones read the database file), and
//     the next commit writes the WAL from its start: with readers shorter
//     than that wait, the WAL file stays under restartPages +
//     checkpointPages + one batch's pages (the same test: 16.6 MB, 21 MB
//     when a restart missed once). A reader that outlasts the wait makes it
//     incomplete. The next is tried at the next passive one if no reader
//     is older than the last checkpointPages pages (that reader has
//     ended), and otherwise (a long reader: a backup, an export) no sooner
//     than restartEvery later, so that such a reader costs the writes at
//     most restartWaitMS per restartEvery; the WAL grows with the writes
//     until it ends;
//   - truncating instead of restarting, when the WAL holds over
//     truncatePages (a long reader let it grow): the same wait, and the
//     file goes back to zero bytes instead of staying that size;
//   - truncating, once writes have paused for truncateIdle (and at start,
//     for a WAL a crash left): the file goes back to zero bytes. It does
//     not wait for readers either (busy_timeout 0 for its length): one
//     still on the WAL makes it stop short, and it is tried again at the
//     next pause.
//
// Each mode counts the checkpoints that failed and those that stopped
// short (the metrics show them). Closing the last connection checkpoints
// and removes the WAL, as before.
const (
	checkpointPages = 1000
	restartPages    = 4 * checkpointPages
	truncatePages   = 4 * restartPages
	restartWaitMS   = 20
	restartEvery    = time.Second
	truncateIdle    = time.Second
)

// writerStats is what the writer measures for the storage metrics
// (StorageStats reads it at any time) and the checkpoint schedule (writer
// goroutine only).
type writerStats struct {
	transaction  *histogram // seconds, begin to commit done, per committed batch
	commitWrites *histogram // writes per committed batch
	checkpoints  [store.CheckpointModes]checkpointStats
	cacheHits    atomic.Int64
	cacheMisses  atomic.Int64 // the write connection's page cache
	walFrames    atomic.Int64 // pages committed to the WAL, ever (the benchmarks' pages a write)

	pages       int       // pages written to the WAL since the last passive checkpoint
	lastCommit  time.Time // when the last batch committed
	resetFailed time.Time // when the last restarting checkpoint ran if a reader outlasted it; zero if it completed
	truncateDue bool      // the WAL may hold pages: idle is armed
	idle        *time.Timer

	hooks checkpointHooks
}

// checkpointHooks are what tests see of the checkpoints, and their clock.
type checkpointHooks struct {
	// onCheckpoint, when set, is told of each checkpoint: its mode, the
	// pages the WAL held and whether all were copied.
	onCheckpoint func(mode store.CheckpointMode, wal int, complete bool)
	// now, when set, replaces time.Now for the restarts' schedule.
	now func() time.Time
}

// checkpointStats is what the checkpoints of one mode did.
type checkpointStats struct {
	seconds    *histogram
	incomplete atomic.Uint64
	errors     atomic.Uint64
}

// Buckets: a commit takes from tens of microseconds (--sync=normal) to
// milliseconds (an fsync); a batch carries 1 to DefaultMaxBatch writes; a
// checkpoint copies up to a few thousand pages and fsyncs the database.
var (
	transactionBounds  = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	commitWritesBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
	checkpointBounds   = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

func (s *writerStats) init(hooks checkpointHooks) {
	s.hooks = hooks
	if s.hooks.now == nil {
		s.hooks.now = time.Now
	}
	s.transaction = newHistogram(transactionBounds...)
	s.commitWrites = newHistogram(commitWritesBounds...)
	for m := range s.checkpoints {
		s.checkpoints[m].seconds = newHistogram(checkpointBounds...)
	}
	// Armed from the start: a WAL left by a crash is truncated once the
	// server is idle, like one this process wrote.
	s.truncateDue = true
	s.idle = time.NewTimer(truncateIdle)
}

// idleC is the channel that says writes may have paused; nil (never
// ready) when the WAL has nothing to give back.
func (s *writerStats) idleC() <-chan time.Time {
	if s.truncateDue {
		return s.idle.C
	}
	return nil
}

// recordCommit records a committed batch of writes writes.
func (s *writerStats) recordCommit(begin, end time.Time, writes int) {
	s.transaction.observe(end.Sub(begin).Seconds())
	s.commitWrites.observe(float64(writes))
	s.lastCommit = end
}

// committed runs after each batch: it takes the write connection's page
// counters and checkpoints when the WAL has grown enough.
func (w *writer) committed() {
	var pages int
	_ = w.conn.Raw(func(dc any) error {
		var hits, misses int
		hits, misses, pages = pageCounters(dc)
		w.storage.cacheHits.Add(int64(hits))
		w.storage.cacheMisses.Add(int64(misses))
		return nil
	})
	if pages == 0 {
		return
	}
	s := &w.storage
	s.walFrames.Add(int64(pages))
	if !s.truncateDue {
		s.truncateDue = true
		s.idle.Reset(truncateIdle)
	}
	if s.pages += pages; s.pages < checkpointPages {
		return
	}
	s.pages = 0
	wal, copied, _ := w.checkpoint(store.CheckpointPassive)
	if wal < restartPages || !s.restartDue(wal-copied) {
		return
	}
	mode := store.CheckpointRestart
	if wal > truncatePages {
		mode = store.CheckpointTruncate
	}
	s.resetFailed = time.Time{}
	if !w.waitingCheckpoint(mode, restartWaitMS) {
		s.resetFailed = s.hooks.now()
	}
}

// restartDue says whether a restarting checkpoint may run after a passive
// one that left uncopied pages, those the readers on the WAL still need:
// always after a restart that completed; after one a reader outlasted, at
// once when no reader is older than the last checkpointPages pages (the
// one it waited for has ended: a reader that lost the CPU, say), and
// otherwise (a reader that may be a long one: a backup, an export) no
// sooner than restartEvery later, so that such a reader costs the writes
// at most restartWaitMS per restartEvery.
func (s *writerStats) restartDue(uncopied int) bool {
	return s.resetFailed.IsZero() || uncopied < checkpointPages || s.hooks.now().Sub(s.resetFailed) >= restartEvery
}

// idle runs when the idle timer fires: it truncates the WAL if no batch
// has committed for truncateIdle, or waits for the rest of that time.
func (w *writer) idle() {
	s := &w.storage
	if wait := truncateIdle - time.Since(s.lastCommit); wait > 0 {
		s.idle.Reset(wait)
		return
	}
	if w.waitingCheckpoint(store.CheckpointTruncate, 0) {
		s.truncateDue, s.pages = false, 0
		return
	}
	s.idle.Reset(truncateIdle) // a reader is still on the WAL: at the next pause
}

// waitingCheckpoint runs a checkpoint that waits for the readers on the
// WAL (RESTART, TRUNCATE) with busy_timeout waitMS rather than the
// connection's, so that a reader still on the WAL holds the writer, and
// every write, no longer than that. It says whether every WAL page was
// copied.
func (w *writer) waitingCheckpoint(mode store.CheckpointMode, waitMS int) bool {
	ctx := context.Background()
	if _, err := w.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout(%d)", waitMS)); err != nil {
		w.storage.checkpoints[mode].errors.Add(1)
		return false
	}
	defer w.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout(%d)", busyTimeoutMS)) //nolint:errcheck // it was set at open; a connection that cannot run a pragma fails the next write anyway
	_, _, complete := w.checkpoint(mode)
	return complete
}

// checkpoint runs one checkpoint in mode and records its time and, when it
// failed or stopped short, that it did. It returns the pages the WAL holds,
// those copied to the database so far (both 0 after a truncating one that
// completed) and whether every one was. A failure is not the writes'
// concern (they are in the WAL): the next checkpoint tries again, as
// SQLite's auto-checkpoint would.
func (w *writer) checkpoint(mode store.CheckpointMode) (log, copied int, complete bool) {
	c := &w.storage.checkpoints[mode]
	begin := time.Now()
	var busy int
	err := w.conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+strings.ToUpper(mode.String())+")").Scan(&busy, &log, &copied)
	c.seconds.observe(time.Since(begin).Seconds())
	complete = err == nil && busy == 0 && log == copied
	switch {
	case err != nil:
		c.errors.Add(1)
	case !complete:
		c.incomplete.Add(1)
	}
	if w.storage.hooks.onCheckpoint != nil {
		w.storage.hooks.onCheckpoint(mode, log, complete)
	}
	return log, copied, complete
}

// pageCounters reads and zeroes the page counters of a driver connection
// (sqlite3_db_status): cache hits, cache misses, and pages written (to
// the WAL, in WAL mode). Read and zeroed often, the 32-bit counters never
// wrap.
func pageCounters(dc any) (hits, misses, written int) {
	st, ok := dc.(sqlitedrv.DBStatus)
	if !ok {
		return 0, 0, 0
	}
	hits, _, _ = st.Status(sqlitedrv.DBStatusCacheHit, true)
	misses, _, _ = st.Status(sqlitedrv.DBStatusCacheMiss, true)
	written, _, _ = st.Status(sqlitedrv.DBStatusCacheWrite, true)
	return hits, misses, written
}

// snapshot returns the writer's histograms, checkpoint counts and page
// cache counts.
func (s *writerStats) snapshot(st *store.StorageStats) {
	st.WriteTransaction = s.transaction.snapshot()
	st.CommitWrites = s.commitWrites.snapshot()
	for m := range s.checkpoints {
		c := &s.checkpoints[m]
		st.Checkpoints[m] = store.CheckpointStats{Seconds: c.seconds.snapshot(), Incomplete: c.incomplete.Load(), Errors: c.errors.Load()}
	}
	st.CacheHits += s.cacheHits.Load()
	st.CacheMisses += s.cacheMisses.Load()
}
