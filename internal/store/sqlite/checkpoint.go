package sqlite

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/historyd/historyd/internal/store"
)

// Checkpoints (issue 15: "checkpoint duration"). SQLite's auto-checkpoint
// runs inside the commit that takes the WAL past wal_autocheckpoint pages:
// its time cannot be told apart from the commit's, and that batch's
// writers wait for it. So the write connection turns it off
// (wal_autocheckpoint(0), db.go) and the writer checkpoints the WAL
// itself, between batches, once the batch has been answered:
//
//   - passive, after a batch, once the batches have written about
//     checkpointPages pages to the WAL since the last one (SQLite's own
//     default): it copies what no reader still needs and never waits, so
//     a long reader makes the WAL grow (the metric shows it) but holds no
//     write up. A WAL fully copied is reused from its start by the next
//     commit that finds no reader on it;
//   - restarting, when a passive one finds the WAL over restartPages
//     (at most once per restartEvery): readers that never pause (one
//     always on the WAL when a commit would reuse it) starve the reuse,
//     and the WAL then grows with the writes, with SQLite's own
//     auto-checkpoint too (measured: 43 MB for 3.2k 1 KB writes and one
//     or two readers looping). It waits up to restartWaitMS for the
//     readers on the WAL to finish (new ones read the database file) and
//     resets it, which bounds the WAL; a long reader costs the writes at
//     most that wait per restartEvery;
//   - truncating, once writes have paused for truncateIdle (and at start,
//     for a WAL a crash left): the file goes back to zero bytes. It does
//     not wait for readers either (busy_timeout 0 for its length): one
//     still on the WAL makes it stop short, and it is tried again at the
//     next pause.
//
// Closing the last connection checkpoints and removes the WAL, as before.
const (
	checkpointPages = 1000
	restartPages    = 4 * checkpointPages
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
	passive      *histogram // seconds per passive checkpoint
	restart      *histogram // seconds per restarting checkpoint
	truncate     *histogram // seconds per truncating checkpoint
	cacheHits    atomic.Int64
	cacheMisses  atomic.Int64 // the write connection's page cache

	pages       int       // pages written to the WAL since the last passive checkpoint
	lastCommit  time.Time // when the last batch committed
	lastRestart time.Time // when the last restarting checkpoint ran
	truncateDue bool      // the WAL may hold pages: idle is armed
	idle        *time.Timer

	// onCheckpoint, when set (tests), is told of each checkpoint.
	onCheckpoint func(mode string, complete bool)
}

// Buckets: a commit takes from tens of microseconds (--sync=normal) to
// milliseconds (an fsync); a batch carries 1 to DefaultMaxBatch writes; a
// checkpoint copies up to a few thousand pages and fsyncs the database.
var (
	transactionBounds  = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	commitWritesBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
	checkpointBounds   = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

func (s *writerStats) init() {
	s.transaction = newHistogram(transactionBounds...)
	s.commitWrites = newHistogram(commitWritesBounds...)
	s.passive = newHistogram(checkpointBounds...)
	s.restart = newHistogram(checkpointBounds...)
	s.truncate = newHistogram(checkpointBounds...)
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
	if !s.truncateDue {
		s.truncateDue = true
		s.idle.Reset(truncateIdle)
	}
	if s.pages += pages; s.pages < checkpointPages {
		return
	}
	s.pages = 0
	if wal, _ := w.checkpoint("PASSIVE", s.passive); wal >= restartPages && time.Since(s.lastRestart) >= restartEvery {
		s.lastRestart = time.Now()
		w.waitingCheckpoint("RESTART", restartWaitMS, s.restart)
	}
}

// idle runs when the idle timer fires: it truncates the WAL if no batch
// has committed for truncateIdle, or waits for the rest of that time.
func (w *writer) idle() {
	s := &w.storage
	if wait := truncateIdle - time.Since(s.lastCommit); wait > 0 {
		s.idle.Reset(wait)
		return
	}
	if w.waitingCheckpoint("TRUNCATE", 0, s.truncate) {
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
func (w *writer) waitingCheckpoint(mode string, waitMS int, h *histogram) bool {
	ctx := context.Background()
	if _, err := w.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout(%d)", waitMS)); err != nil {
		return false
	}
	defer w.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout(%d)", busyTimeoutMS)) //nolint:errcheck // it was set at open; a connection that cannot run a pragma fails the next write anyway
	_, complete := w.checkpoint(mode, h)
	return complete
}

// checkpoint runs one checkpoint in mode and records its time. It returns
// the pages the WAL holds and whether every one was copied. A failure is
// not the writes' concern (they are in the WAL): the next checkpoint tries
// again, as SQLite's auto-checkpoint would.
func (w *writer) checkpoint(mode string, h *histogram) (pages int, complete bool) {
	begin := time.Now()
	var busy, log, copied int
	err := w.conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &log, &copied)
	h.observe(time.Since(begin).Seconds())
	complete = err == nil && busy == 0 && log == copied
	if w.storage.onCheckpoint != nil {
		w.storage.onCheckpoint(mode, complete)
	}
	return log, complete
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

// snapshot returns the writer's histograms and page cache counts.
func (s *writerStats) snapshot(st *store.StorageStats) {
	st.WriteTransaction = s.transaction.snapshot()
	st.CommitWrites = s.commitWrites.snapshot()
	st.CheckpointPassive = s.passive.snapshot()
	st.CheckpointRestart = s.restart.snapshot()
	st.CheckpointTruncate = s.truncate.snapshot()
	st.CacheHits += s.cacheHits.Load()
	st.CacheMisses += s.cacheMisses.Load()
}
