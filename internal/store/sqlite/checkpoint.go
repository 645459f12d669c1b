package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
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
// turns it off (wal_autocheckpoint(0), db.go) and the store checkpoints the
// WAL itself, between batches:
//
//   - passive, once the batches have written about checkpointPages pages
//     to the WAL since the last one: it copies what no reader still needs
//     and does not wait for the readers. 4000 pages (16 MB), not SQLite's
//     own 1000: a checkpoint costs two fsyncs and a pread and a pwrite per
//     page it copies, and a page written again before the next checkpoint
//     is copied once, so fewer checkpoints copy fewer pages (issue 14 and
//     17's benchmarks write each index's page of each branch or owner in
//     every batch). Measured on 2 cores: the checkpoints' time a write
//     fell from 18-23 µs to 13-16 µs (BenchmarkAddMessageSyncNormal), and
//     the sqlite/memory ratio of the Exchange row from 0.44-0.51 to
//     0.53-0.58 (docs/decisions/0016). It runs on
//     a connection and a goroutine of its own (the checkpointer), not on
//     the writer: the writer asks for it after a batch and goes on
//     committing while it copies and fsyncs (SQLite lets a checkpoint run
//     beside a writer: it copies the frames that were in the WAL when it
//     began). On the writer, with --sync=normal, the writes queued behind a
//     checkpoint waited for its two fsyncs: BenchmarkAddMessageSyncNormal
//     spent about 40 µs of the writer's time a write there, of about 100.
//     The writer takes its result after a later batch; when the next one is
//     due before the last has ended it waits for it, so the WAL grows no
//     further than before between them. A WAL fully copied is reused from
//     its start by the next commit that finds no reader on it and no frame
//     written since; under steady writes there always is one, so it is the
//     restarting checkpoint below that lets the WAL be reused;
//   - restarting, on the writer, when the WAL holds restartPages or more
//     (as far as the writer knows: the last passive one's count and the
//     pages written since), looked at when a passive one's result comes
//     and when the next is due: the WAL is copied to its end and the next
//     commit writes it from its start. The writes wait for what it copies,
//     all written since the last passive one began: when that is at least
//     a quarter of checkpointPages, another passive one copies it first,
//     beside the writes (catchUp), and the restart follows its result.
//     It waits up to restartWaitMS for the readers on the WAL to finish
//     (new ones read the database file):
//     readers that never pause (one always on the WAL when a commit would
//     reuse it) would starve the reuse, and the WAL would grow with the
//     writes (TestWALBoundedUnderLoad, 3.2k 1 KB writes and two readers
//     looping: 43 MB with SQLite's own auto-checkpoint; 45-75 MB when a
//     restart ran at most once a second). With readers shorter than that
//     wait, the WAL file stays under restartPages + 2 * checkpointPages
//     (catchUp's included) + one batch's pages: 82-84 MB measured with
//     20,000 writes, about 100 MB at most (the same test on a schedule of
//     1000 pages: 16.6 MB, 21 MB when a restart missed once, with the
//     passive ones on the writer). A reader that outlasts the wait makes it
//     incomplete. The next is tried, without a catch-up, at the next
//     passive one if no reader is older than the last
//     checkpointPages pages (that reader has ended), and otherwise (a long
//     reader: a backup, an export) no sooner than restartEvery later, so
//     that such a reader costs the writes at most restartWaitMS per
//     restartEvery; the WAL grows with the writes until it ends. Most of
//     its copying was done by the passive ones before it;
//   - truncating instead of restarting, when the WAL holds over
//     truncatePages (a long reader let it grow): the same wait, and the
//     file goes back to zero bytes instead of staying that size;
//   - truncating, once writes have paused for truncateIdle (and at start,
//     for a WAL a crash left): the file goes back to zero bytes. It does
//     not wait for readers either (busy_timeout 0 for its length): one
//     still on the WAL makes it stop short, and it is tried again at the
//     next pause.
//
// Only one runs at a time: the writer runs its own only when no passive
// one is running. Each mode counts the checkpoints that failed and those
// that stopped short (the metrics show them). Closing the last connection
// checkpoints and removes the WAL, as before.
const (
	checkpointPages = 4000
	restartPages    = 4 * checkpointPages
	truncatePages   = 2 * restartPages
	restartWaitMS   = 20
	// catchUpShare: a restart that would copy at least a passive one's
	// 1/catchUpShare of pages written since the last began first lets a
	// passive one copy them (catchUp).
	catchUpShare = 4
	restartEvery = time.Second
	truncateIdle = time.Second
	// checkpointCacheKiB is the checkpointer connection's page cache: a
	// checkpoint copies the WAL's frames to the database file through a
	// buffer of its own, not through the cache.
	checkpointCacheKiB = 64
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

	pages         int       // pages written to the WAL since the last passive checkpoint was asked for
	walPages      int       // pages in the WAL as far as the writer knows (at least as many): the last passive one's, and those written since
	uncopied      int       // pages the last passive one left in the WAL for the readers that still need them
	tried         bool      // a restarting checkpoint ran since the last passive one's result
	caughtUp      bool      // catchUp asked for a passive one, or a restart was tried, since the last restart that completed
	catchUpsAsked int       // passive ones catchUp asked for (the writer's; tests read it after close)
	lastCommit    time.Time // when the last batch committed
	resetFailed   time.Time // when the last restarting checkpoint ran if a reader outlasted it; zero if it completed
	truncateDue   bool      // the WAL may hold pages: idle is armed
	idle          *time.Timer

	hooks checkpointHooks
}

// checkpointHooks are what tests see of the checkpoints, and their clock.
type checkpointHooks struct {
	// onCheckpoint, when set, is told of each checkpoint: its mode, the
	// pages the WAL held and whether all were copied.
	onCheckpoint func(mode store.CheckpointMode, wal int, complete bool)
	// now, when set, replaces time.Now for the restarts' schedule.
	now func() time.Time
	// pages, when set, replaces the WAL sizes the checkpoints run at
	// (checkpointPages and the rest): tests that write a WAL past the
	// truncating size write a smaller one.
	pages walSchedule
}

// walSchedule is the WAL sizes, in pages, at which the writer checkpoints:
// passive each passive pages written, restarting when the WAL holds restart
// pages, truncating instead of restarting over truncate pages.
type walSchedule struct{ passive, restart, truncate int }

// orDefault is the schedule with each size left zero the store's own.
func (w walSchedule) orDefault() walSchedule {
	if w.passive == 0 {
		w.passive = checkpointPages
	}
	if w.restart == 0 {
		w.restart = restartPages
	}
	if w.truncate == 0 {
		w.truncate = truncatePages
	}
	return w
}

// checkpointStats is what the checkpoints of one mode did.
type checkpointStats struct {
	seconds    *histogram
	incomplete atomic.Uint64
	errors     atomic.Uint64
}

// Buckets: a commit takes from tens of microseconds (--sync=normal) to
// milliseconds (an fsync); a batch carries 1 to DefaultMaxBatch writes; a
// checkpoint copies up to about 4000 pages (passive; a restart may copy
// more) and fsyncs the database.
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
	s.hooks.pages = s.hooks.pages.orDefault()
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
// counters and the result of the passive checkpoint it asked for, if it
// ended, and asks for the next one when the WAL has grown enough.
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
	s.pages += pages
	s.walPages += pages
	if r, ok := w.ckpt.result(false); ok {
		s.took(r)
		if w.catchUp() {
			return
		}
		w.restartIfDue()
	}
	if s.pages < s.hooks.pages.passive {
		return
	}
	// The next is due: the last one, if it is still copying, is waited for
	// (the WAL grows no further between two than with them on the writer),
	// and the WAL may have reached restartPages since its result.
	if r, ok := w.ckpt.result(true); ok {
		s.took(r)
	}
	if !s.tried && w.catchUp() {
		return
	}
	s.pages = 0
	if !s.tried && w.restartIfDue() {
		return // the WAL is copied to its end; the next passive one after checkpointPages more
	}
	w.ckpt.start()
}

// took takes a passive checkpoint's result: log pages were in the WAL when
// it began, and it copied copied of them.
//
// One that could not run says nothing of the WAL: walPages, which counts
// every page committed since the last checkpoint that did, is kept, so the
// writer's restart (or truncate) still bounds the WAL when the passive
// ones keep failing (review: a failing checkpointer left the WAL growing
// until the writes paused).
func (s *writerStats) took(r checkpointResult) {
	s.tried = false
	if !r.ok {
		return
	}
	s.walPages = r.log + s.pages // s.pages were written since it was asked for: at least the WAL's size now
	s.uncopied = r.log - r.copied
}

// catchUp asks for a passive checkpoint where a restart is due but would
// copy, with the writes waiting, at least passive/catchUpShare pages
// written since the last passive one began: that one copies them beside
// the writes, and the restart at its result copies only what was written
// meanwhile. Once before each restart that completes (caughtUp): the
// restart follows the next result whatever it leaves, and one a reader
// outlasted is tried again as before, without another.
// Measured in process, 50 writers on a branch each: with passive ones
// every 4000 pages and no catch-up, a restart took 13 ms on average and the
// writes' p99 was 14-15 ms, against 6-7 ms and 9-11 ms every 1000 pages.
func (w *writer) catchUp() bool {
	s := &w.storage
	if !s.catchUpDue() {
		return false
	}
	s.caughtUp = true
	s.catchUpsAsked++
	s.pages = 0
	w.ckpt.start()
	return true
}

// catchUpDue says whether catchUp asks for a passive checkpoint: a restart
// is due (restartWanted), none was asked for or tried since the last
// restart that completed, and at least a quarter of a passive one's pages
// were written since the last passive one began.
func (s *writerStats) catchUpDue() bool {
	return !s.caughtUp && s.pages >= s.hooks.pages.passive/catchUpShare && s.restartWanted()
}

// restartWanted says whether the WAL's size calls for a restarting (or
// truncating) checkpoint and one may run (restartDue).
func (s *writerStats) restartWanted() bool {
	return s.walPages >= s.hooks.pages.restart && s.restartDue(s.uncopied)
}

// restartIfDue runs, on the writer, the restarting (or truncating)
// checkpoint the WAL's size calls for, if it may run (restartDue), and
// says whether it ran and completed.
func (w *writer) restartIfDue() bool {
	s := &w.storage
	if !s.restartWanted() {
		return false
	}
	// Until it completes, no catch-up: a retry after a reader outlasted it
	// comes at the next passive one, not the one after.
	s.tried, s.caughtUp = true, true
	mode := store.CheckpointRestart
	if s.walPages > s.hooks.pages.truncate {
		mode = store.CheckpointTruncate
	}
	s.resetFailed = time.Time{}
	if !w.waitingCheckpoint(mode, restartWaitMS) {
		s.resetFailed = s.hooks.now()
		return false
	}
	s.walPages, s.uncopied, s.caughtUp = 0, 0, false
	return true
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
	return s.resetFailed.IsZero() || uncopied < s.hooks.pages.passive || s.hooks.now().Sub(s.resetFailed) >= restartEvery
}

// idle runs when the idle timer fires: it truncates the WAL if no batch
// has committed for truncateIdle, or waits for the rest of that time.
func (w *writer) idle() {
	s := &w.storage
	if wait := truncateIdle - time.Since(s.lastCommit); wait > 0 {
		s.idle.Reset(wait)
		return
	}
	if r, ok := w.ckpt.result(true); ok { // the truncate does what a restart it called for would (one checkpoint at a time)
		s.took(r)
	}
	if w.waitingCheckpoint(store.CheckpointTruncate, 0) {
		s.truncateDue, s.pages, s.walPages, s.uncopied, s.caughtUp = false, 0, 0, 0, false
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

// checkpoint runs one checkpoint in mode on the writer's connection and
// records its time and, when it failed or stopped short, that it did. It
// returns the pages the WAL holds, those copied to the database so far
// (both 0 after a truncating one that completed) and whether every one
// was. A failure is not the writes' concern (they are in the WAL): the
// next checkpoint tries again, as SQLite's auto-checkpoint would.
func (w *writer) checkpoint(mode store.CheckpointMode) (log, copied int, complete bool) {
	log, copied, complete, _ = w.checkpointOn(w.conn, mode)
	return log, copied, complete
}

// checkpointOn is checkpoint on conn (the checkpointer's, for a passive
// one), with the pragma's error.
func (w *writer) checkpointOn(conn *sql.Conn, mode store.CheckpointMode) (log, copied int, complete bool, err error) {
	c := &w.storage.checkpoints[mode]
	begin := time.Now()
	var busy int
	err = conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+strings.ToUpper(mode.String())+")").Scan(&busy, &log, &copied)
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
	return log, copied, complete, err
}

// checkpointer runs the passive checkpoints the writer asks for, on a
// connection of its own (DB.checkpointDSN), on a goroutine of its own
// (writer.runCheckpointer), so the writer goes on committing while one
// copies and fsyncs. It runs one at a time: the writer asks for the next
// only once it has taken the last one's result.
//
// Owner and stop path: the writer opens it (newWriter) and closes it when
// it stops (writer.run): close ends the goroutine after the checkpoint in
// progress, then closes the connection, before the writer gives its own
// back, so the write connection stays the last one closed (it checkpoints
// the WAL and removes it).
type checkpointer struct {
	pool    *sql.DB
	conn    *sql.Conn
	reqs    chan struct{}         // cap 1; closed by close
	results chan checkpointResult // cap 1
	exited  chan struct{}
	running bool // one was asked for and its result not taken yet (writer goroutine only)
}

// checkpointResult is what a passive checkpoint found: the pages in the WAL
// when it began, and how many of them the database has; ok is false when it
// could not run (an error, or SQLite's -1 for both), and then neither says
// anything of the WAL.
type checkpointResult struct {
	log, copied int
	ok          bool
}

// openCheckpointer opens the checkpointer's connection on dsn.
func openCheckpointer(ctx context.Context, dsn string) (*checkpointer, error) {
	pool, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	pool.SetMaxOpenConns(1)
	conn, err := pool.Conn(ctx)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &checkpointer{pool: pool, conn: conn, reqs: make(chan struct{}, 1),
		results: make(chan checkpointResult, 1), exited: make(chan struct{})}, nil
}

// runCheckpointer runs the checkpointer's passive checkpoints until close.
func (w *writer) runCheckpointer() {
	c := w.ckpt
	defer close(c.exited)
	for range c.reqs {
		c.results <- w.passive()
	}
}

// passive runs one passive checkpoint on the checkpointer's connection,
// opening a new one first when the last one broke (review: a connection
// that broke once failed every later checkpoint).
func (w *writer) passive() checkpointResult {
	c := w.ckpt
	if c.conn == nil {
		conn, err := c.pool.Conn(context.Background())
		if err != nil {
			w.storage.checkpoints[store.CheckpointPassive].errors.Add(1)
			return checkpointResult{}
		}
		c.conn = conn
	}
	log, copied, _, err := w.checkpointOn(c.conn, store.CheckpointPassive)
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		c.conn.Close()
		c.conn = nil
	}
	return checkpointResult{log, copied, err == nil && log >= 0}
}

// start asks for a passive checkpoint (writer goroutine; none running).
func (c *checkpointer) start() {
	c.running = true
	c.reqs <- struct{}{}
}

// result returns the result of the passive checkpoint asked for, if one
// was: at once if it has ended (ok false if not), or once it ends when
// wait (writer goroutine).
func (c *checkpointer) result(wait bool) (r checkpointResult, ok bool) {
	if !c.running {
		return r, false
	}
	if wait {
		r = <-c.results
	} else {
		select {
		case r = <-c.results:
		default:
			return r, false
		}
	}
	c.running = false
	return r, true
}

// close ends the checkpointer after the checkpoint in progress and closes
// its connection (writer goroutine, at its end).
func (c *checkpointer) close() {
	close(c.reqs)
	<-c.exited
	if c.conn != nil {
		c.conn.Close()
	}
	c.pool.Close()
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
