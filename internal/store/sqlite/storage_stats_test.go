package sqlite

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

var kilobyteInput = store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(kilobyteText)}}

// issue 15: "Storage metrics: write transaction latency and commits per
// fsync (histograms), database and WAL size, ... cache hit ratio": each
// moves with the writes and reads that make it.
func TestStorageStatsMove(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	ctx := context.Background()
	before := s.StorageStats()
	if before.DatabaseBytes <= 0 {
		t.Fatalf("database bytes %d on a migrated database", before.DatabaseBytes)
	}
	// A reader on the WAL keeps it from being truncated while the test
	// looks at it.
	tx, err := s.db.read.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	var n int
	if err := tx.QueryRow("SELECT count(*) FROM branches").Scan(&n); err != nil {
		t.Fatal(err)
	}
	res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	const writes = 20
	for range writes {
		if _, err := s.AddMessage(ctx, res.Branch.ID, kilobyteInput, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := s.ListMessages(ctx, res.Branch.ID, store.ListInput{}); err != nil {
			t.Fatal(err)
		}
	}
	after := s.StorageStats()
	commits, committed := s.Writes()
	if got := after.WriteTransaction.Count; got != uint64(commits) || got < before.WriteTransaction.Count+1 {
		t.Errorf("write transactions observed %d, commits %d (before %d)", got, commits, before.WriteTransaction.Count)
	}
	if after.WriteTransaction.Sum <= 0 {
		t.Errorf("write transaction seconds sum %v", after.WriteTransaction.Sum)
	}
	if got := after.CommitWrites.Sum; got != float64(committed) {
		t.Errorf("writes per commit add up to %v, want the %d writes committed", got, committed)
	}
	if after.WALBytes <= 0 {
		t.Errorf("WAL bytes %d after %d writes with a reader on it", after.WALBytes, writes)
	}
	if after.CacheHits <= before.CacheHits || after.CacheMisses <= 0 {
		t.Errorf("cache hits %d (before %d), misses %d: want both counted", after.CacheHits, before.CacheHits, after.CacheMisses)
	}
	h := after.CommitWrites
	if len(h.Buckets) != len(h.Bounds) || h.Buckets[len(h.Buckets)-1] > h.Count {
		t.Errorf("commit writes histogram %+v: buckets cumulative, at most count", h)
	}
}

// issue 15: the writer checkpoints itself (to time it); under steady
// writes with readers that never pause, the WAL stays bounded by pages, not
// by time: a passive checkpoint each checkpointPages pages, and a
// restarting one as soon as a passive one finds restartPages in the WAL
// (the review: one restart a second let the WAL grow to 45-75 MB here).
// It runs on smallWAL's schedule, which 3,200 writes cross several times.
func TestWALBoundedUnderLoad(t *testing.T) {
	s := newSmallWALStore(t)
	ctx := context.Background()
	const writers, perWriter = 8, 400
	var maxWAL atomic.Int64
	done := make(chan struct{})
	var readers sync.WaitGroup
	var branches [writers]store.BranchInfo
	for i := range branches {
		res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
		if err != nil {
			t.Fatal(err)
		}
		branches[i] = res.Branch
	}
	// Two readers that never pause, each read short (ten messages): one
	// is always on the WAL when a commit would reuse it.
	for i := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.ListMessages(ctx, branches[i].ID, store.ListInput{PageSize: 10}); err != nil {
					t.Error(err)
					return
				}
				if n := fileSize(s.Path() + "-wal"); n > maxWAL.Load() {
					maxWAL.Store(n)
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWriter {
				if _, err := s.AddMessage(ctx, branches[i].ID, kilobyteInput, store.WriteOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	readers.Wait()
	st := s.StorageStats()
	if n := st.WALBytes; n > maxWAL.Load() {
		maxWAL.Store(n)
	}
	passive, restart := st.Checkpoints[store.CheckpointPassive], st.Checkpoints[store.CheckpointRestart]
	t.Logf("%d writes: %d passive (%d incomplete) and %d restarting (%d incomplete) checkpoints, largest WAL %d bytes, database %d bytes",
		writers*perWriter, passive.Seconds.Count, passive.Incomplete, restart.Seconds.Count, restart.Incomplete, maxWAL.Load(), st.DatabaseBytes)
	if passive.Seconds.Count == 0 {
		t.Fatalf("no passive checkpoint after %d KB written", writers*perWriter)
	}
	// A passive checkpoint runs once smallWAL.passive pages have been
	// written since the last, so the one that finds smallWAL.restart or
	// more finds less than restart + passive + a batch's pages; the
	// restart it runs (after at most one more passive one, catchUp, which
	// adds up to passive pages) lets the next commit write the WAL from
	// its start.
	// A batch here is at most one 1 KB write per writer: far fewer than
	// smallWAL.passive pages. A restart that a reader outlasts (one that
	// lost the CPU on a loaded machine) is tried again at the next
	// passive checkpoint, these readers being short: each such adds
	// smallWAL.passive at most.
	var pageSize int64
	if err := s.db.read.QueryRow("PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	const walHeader, frameHeader = 32, 24
	pages := int64(smallWAL.restart + (3+int(restart.Incomplete))*smallWAL.passive)
	if bound := walHeader + pages*(pageSize+frameHeader); maxWAL.Load() > bound {
		t.Fatalf("WAL reached %d bytes, want <= %d (%d pages)", maxWAL.Load(), bound, pages)
	}
}

// issue 15: closing still checkpoints: the WAL is gone and the rows are in
// the database file.
func TestCloseCheckpointsWAL(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(context.Background(), StoreConfig{Config: Config{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.CreateBranch(context.Background(), store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMessage(context.Background(), res.Branch.ID, kilobyteInput, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+"-wal")); !os.IsNotExist(err) {
		t.Fatalf("WAL after close: %v, want none", err)
	}
	s, err = OpenStore(context.Background(), StoreConfig{Config: Config{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if info, err := s.GetBranch(context.Background(), res.Branch.ID); err != nil || info.MessageCount != 1 {
		t.Fatalf("after reopen: %+v, %v", info, err)
	}
}

// issue 15: a WAL a crash left (nothing checkpointed it) is checkpointed
// and truncated once the restarted writer is idle, and what it held is
// kept.
func TestRestartTruncatesCrashWAL(t *testing.T) {
	crashed := openT(t, Config{})
	for _, k := range []string{"a", "b", "c"} {
		if _, err := crashed.write.Exec("INSERT INTO store_meta (key, value) VALUES (?, 'v')", k); err != nil {
			t.Fatal(err)
		}
	}
	// The files as kill -9 would leave them: the rows in the WAL only
	// (wal_autocheckpoint is 0 and no writer runs).
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{FileName, FileName + "-wal"} {
		copyFile(t, filepath.Join(filepath.Dir(crashed.Path), name), filepath.Join(dir, name))
	}
	if fileSize(filepath.Join(dir, FileName+"-wal")) == 0 {
		t.Fatal("no WAL to recover: the test does not test")
	}
	db := openT(t, Config{Dir: dir})
	checkpoints := make(chan bool, 16)
	w, err := newWriter(context.Background(), db, 0, checkpointHooks{onCheckpoint: func(mode store.CheckpointMode, _ int, complete bool) {
		if mode == store.CheckpointTruncate {
			checkpoints <- complete
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	select {
	case complete := <-checkpoints:
		if !complete {
			t.Fatal("the idle truncate did not complete with no reader")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no truncating checkpoint within 30s of an idle start")
	}
	if n := fileSize(filepath.Join(dir, FileName+"-wal")); n != 0 {
		t.Fatalf("WAL %d bytes after the truncate", n)
	}
	if got := keys(t, db); !got["a"] || !got["b"] || !got["c"] {
		t.Fatalf("rows %v after recovery, want a b c", got)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// issue 15 (review: "a scrape can stall reads"): a scrape takes no read
// connection, so a read never waits for one behind it: with one read
// connection and one reader, reads that run while scrapes do never wait
// (the pool counts every wait), and the scrapes count their pages.
func TestScrapeDoesNotBlockReads(t *testing.T) {
	ctx := context.Background()
	s, err := OpenStore(ctx, StoreConfig{Config: Config{Dir: t.TempDir(), Readers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMessage(ctx, res.Branch.ID, kilobyteInput, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	before := s.StorageStats()
	stop, stopped := make(chan struct{}), make(chan struct{})
	var scrapes atomic.Int64
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.StorageStats()
			scrapes.Add(1)
		}
	}()
	const reads = 2000
	for i := 0; i < reads || scrapes.Load() < reads; i++ {
		if _, err := s.ListMessages(ctx, res.Branch.ID, store.ListInput{}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-stopped
	if n := s.db.read.Stats().WaitCount; n != 0 {
		t.Errorf("reads waited %d times for the read connection while %d scrapes ran", n, scrapes.Load())
	}
	if after := s.StorageStats(); after.CacheHits < before.CacheHits+reads {
		t.Errorf("cache hits %d after %d reads (before %d): the reads' pages not counted", after.CacheHits, reads, before.CacheHits)
	}
}

// issue 14 (review of the checkpointer beside the writer): when the
// passive checkpoints cannot run (the checkpointer's connection broke and
// no other can be opened), the writer's restarts still bound the WAL: it
// counts every page committed since the last checkpoint that ran.
func TestWALBoundedWhenPassiveCheckpointsFail(t *testing.T) {
	s := newSmallWALStore(t)
	ctx := context.Background()
	// Before any write, so before the checkpointer is asked for one: the
	// pool refuses a new connection and the one it has is gone.
	c := s.w.ckpt
	if err := c.pool.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.conn.Close(); err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 8, 500
	var maxWAL atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWriter {
				if _, err := s.AddMessage(ctx, res.Branch.ID, kilobyteInput, store.WriteOptions{}); err != nil {
					t.Error(err)
					return
				}
				if n := fileSize(s.Path() + "-wal"); n > maxWAL.Load() {
					maxWAL.Store(n)
				}
			}
		}()
	}
	wg.Wait()
	st := s.StorageStats()
	passive, restart, truncate := st.Checkpoints[store.CheckpointPassive], st.Checkpoints[store.CheckpointRestart], st.Checkpoints[store.CheckpointTruncate]
	t.Logf("%d writes: %d passive checkpoints failed, %d restarting and %d truncating ones, largest WAL %d bytes",
		writers*perWriter, passive.Errors, restart.Seconds.Count, truncate.Seconds.Count, maxWAL.Load())
	if passive.Errors == 0 {
		t.Fatal("no passive checkpoint failed: the test does not test")
	}
	if restart.Seconds.Count+truncate.Seconds.Count == 0 {
		t.Fatal("no restarting checkpoint while the passive ones failed")
	}
	var pageSize int64
	if err := s.db.read.QueryRow("PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	const walHeader, frameHeader = 32, 24
	pages := int64(smallWAL.restart + 3*smallWAL.passive) // a passive one (failing) and catchUp's before the restart
	if bound := walHeader + pages*(pageSize+frameHeader); maxWAL.Load() > bound {
		t.Fatalf("WAL reached %d bytes, want <= %d (%d pages)", maxWAL.Load(), bound, pages)
	}
}

// issue 14 (same review): a checkpointer whose connection broke opens
// another, so one broken connection fails one passive checkpoint, not
// every later one.
func TestCheckpointerReopensItsConnection(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	ctx := context.Background()
	if err := s.w.ckpt.conn.Close(); err != nil { // before any write: see TestWALBoundedWhenPassiveCheckpointsFail
		t.Fatal(err)
	}
	res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	for i, passive := 0, (store.CheckpointStats{}); passive.Seconds.Count < 3; i, passive = i+1, s.StorageStats().Checkpoints[store.CheckpointPassive] {
		if i == 20_000 {
			t.Fatalf("%d writes and %d passive checkpoints, want 3", i, passive.Seconds.Count)
		}
		if _, err := s.AddMessage(ctx, res.Branch.ID, kilobyteInput, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if passive := s.StorageStats().Checkpoints[store.CheckpointPassive]; passive.Errors != 1 {
		t.Fatalf("%d of %d passive checkpoints failed, want the first alone", passive.Errors, passive.Seconds.Count)
	}
}

// smallWAL is the schedule of the tests that bound the WAL: the store's
// before checkpointPages went from 1000 to 4000, so that a few thousand
// 1 KB writes cross it several times.
var smallWAL = walSchedule{passive: 1000, restart: 4000, truncate: 16000}

// newSmallWALStore is newTestStore's store on smallWAL's schedule.
func newSmallWALStore(t *testing.T) *Store {
	t.Helper()
	return newTestStoreWith(t, storetest.Options{}, func(c *StoreConfig) { c.walSchedule = smallWAL })
}
