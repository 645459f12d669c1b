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
// writes with readers running, the WAL stays bounded: passive checkpoints
// run and the WAL is reused from its start.
func TestWALBoundedUnderLoad(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
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
				if _, err := s.ListMessages(ctx, branches[i].ID, store.ListInput{PageSize: 50}); err != nil {
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
	// restartPages, plus what is written in the restartEvery before the
	// next restart when one found a reader past its wait; without the
	// restarts, the WAL took 36 MB here.
	const bound = 2 * restartPages * (4096 + 24)
	t.Logf("%d writes: %d passive and %d restarting checkpoints, largest WAL %d bytes, database %d bytes",
		writers*perWriter, st.CheckpointPassive.Count, st.CheckpointRestart.Count, maxWAL.Load(), st.DatabaseBytes)
	if st.CheckpointPassive.Count == 0 {
		t.Fatalf("no passive checkpoint after %d KB written", writers*perWriter)
	}
	if maxWAL.Load() > bound {
		t.Fatalf("WAL reached %d bytes, want <= %d", maxWAL.Load(), bound)
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
	w, err := newWriter(db.write, 0, func(mode string, complete bool) {
		if mode == "TRUNCATE" {
			checkpoints <- complete
		}
	})
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
