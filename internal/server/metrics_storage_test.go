package server

import (
	"context"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// issue 15: "Storage metrics: write transaction latency and commits per fsync (histograms),
// database and WAL size, checkpoint duration, cache hit ratio", read from a real sqlite store:
// the histograms count its commits and the sizes and cache counters move with its writes.
func TestStorageMetrics(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.OpenStore(ctx, sqlite.StoreConfig{Config: sqlite.Config{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := NewMetrics()
	if err := m.WatchStorage(s); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchStorage(s); err == nil {
		t.Error("a second WatchStorage registered the same metrics twice")
	}
	before, _ := metricValue(t, m, "historyd_store_write_transaction_seconds", nil)
	res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("a write")}}
	for range 5 {
		if _, err := s.AddMessage(ctx, res.Branch.ID, in, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ListMessages(ctx, res.Branch.ID, store.ListInput{}); err != nil {
		t.Fatal(err)
	}
	commits, writes := s.Writes()
	if got, _ := metricValue(t, m, "historyd_store_write_transaction_seconds", nil); got != float64(commits) || got < before+1 {
		t.Errorf("write transactions observed %v, want the %d commits (before the writes: %v)", got, commits, before)
	}
	if got, _ := metricValue(t, m, "historyd_store_commit_writes", nil); got != float64(commits) {
		t.Errorf("commit writes observed %v, want %d (one per commit, carrying %d writes)", got, commits, writes)
	}
	for _, mode := range []string{"passive", "restart", "truncate"} {
		if _, ok := metricValue(t, m, "historyd_store_checkpoint_seconds", map[string]string{"mode": mode}); !ok {
			t.Errorf("no checkpoint histogram for mode %s", mode)
		}
		// issue 15 (review: "checkpoint failures are invisible"): counted by mode.
		for _, name := range []string{"historyd_store_checkpoints_incomplete_total", "historyd_store_checkpoint_errors_total"} {
			if got, ok := metricValue(t, m, name, map[string]string{"mode": mode}); !ok || got != 0 {
				t.Errorf("%s{mode=%q} = %v (present %v), want 0 with no reader held", name, mode, got, ok)
			}
		}
	}
	for _, name := range []string{"historyd_store_database_bytes", "historyd_store_cache_hits_total", "historyd_store_cache_misses_total"} {
		if got, ok := metricValue(t, m, name, nil); !ok || got <= 0 {
			t.Errorf("%s = %v (present %v), want > 0 after writes and reads", name, got, ok)
		}
	}
	if _, ok := metricValue(t, m, "historyd_store_wal_bytes", nil); !ok {
		t.Error("no historyd_store_wal_bytes")
	}
}

// storageSnapshot is a StorageStats that reports a fixed snapshot.
type storageSnapshot store.StorageStats

func (s storageSnapshot) StorageStats() store.StorageStats { return store.StorageStats(s) }

// issue 15 (review: "checkpoint failures are invisible"): each mode's series read that mode's
// checkpoints: their seconds, those that stopped short and those that failed.
func TestStorageMetricsCheckpointModes(t *testing.T) {
	var st store.StorageStats
	for mode := range store.CheckpointModes {
		st.Checkpoints[mode] = store.CheckpointStats{
			Seconds:    store.Histogram{Bounds: []float64{1}, Buckets: []uint64{uint64(mode) + 1}, Count: uint64(mode) + 1},
			Incomplete: 10 + uint64(mode),
			Errors:     20 + uint64(mode),
		}
	}
	m := NewMetrics()
	if err := m.WatchStorage(storageSnapshot(st)); err != nil {
		t.Fatal(err)
	}
	for mode := range store.CheckpointModes {
		labels := map[string]string{"mode": mode.String()}
		for name, want := range map[string]float64{
			"historyd_store_checkpoint_seconds":           float64(mode) + 1,
			"historyd_store_checkpoints_incomplete_total": 10 + float64(mode),
			"historyd_store_checkpoint_errors_total":      20 + float64(mode),
		} {
			if got, ok := metricValue(t, m, name, labels); !ok || got != want {
				t.Errorf("%s{mode=%q} = %v (present %v), want %v", name, mode, got, ok, want)
			}
		}
	}
}
