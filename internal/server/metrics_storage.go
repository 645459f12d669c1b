package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/historyd/historyd/internal/store"
)

// StorageStats is what the storage metrics read: a durable engine's snapshot of its storage
// (sqlite.Store implements it).
type StorageStats interface {
	StorageStats() store.StorageStats
}

// The checkpoint series' help, one per name whatever the mode.
const (
	checkpointSecondsHelp    = "Seconds each WAL checkpoint took, by mode: passive (after a commit, each ~4000 pages written to the WAL), restart (readers kept the WAL from being reused), truncate (writes paused, or the WAL far over: the WAL file back to 0 bytes). Queued writes wait for it."
	checkpointIncompleteHelp = "WAL checkpoints that stopped short, by mode: passive, pages a reader's snapshot still needed were left in the WAL (common under reads); restart and truncate, a reader outlasted the 20 ms wait, so the WAL was not reset and grows."
	checkpointErrorsHelp     = "WAL checkpoints that failed, by mode (an I/O error, a full disk); the next one tries again."
)

// WatchStorage adds the storage metrics of s (issue 15), read from s.StorageStats() at each
// scrape: historyd_store_write_transaction_seconds, historyd_store_commit_writes,
// historyd_store_checkpoint_seconds{mode}, historyd_store_checkpoints_incomplete_total{mode},
// historyd_store_checkpoint_errors_total{mode}, historyd_store_database_bytes,
// historyd_store_wal_bytes, historyd_store_cache_hits_total and historyd_store_cache_misses_total.
// docs/operations.md#storage-metrics says how to read them.
func (m *Metrics) WatchStorage(s StorageStats) error {
	metrics := []snapshotMetric[store.StorageStats]{
		histogram("store_write_transaction_seconds", "Seconds from a write transaction's begin to its commit's end, per committed transaction (a group commit's batch).",
			nil, func(st store.StorageStats) store.Histogram { return st.WriteTransaction }),
		histogram("store_commit_writes", "Writes per committed transaction: with --sync=full a commit is one fsync, so these are the writes per fsync; with --sync=normal, the writes per commit.",
			nil, func(st store.StorageStats) store.Histogram { return st.CommitWrites }),
		gauge("store_database_bytes", "Size of the database file in bytes.", func(st store.StorageStats) float64 { return float64(st.DatabaseBytes) }),
		gauge("store_wal_bytes", "Size of the database's write-ahead log file in bytes (0: none, after a truncating checkpoint or a clean close).", func(st store.StorageStats) float64 { return float64(st.WALBytes) }),
		counter("store_cache_hits_total", "Page lookups SQLite's page caches answered, all connections; hit ratio = rate(hits) / (rate(hits) + rate(misses)).", func(st store.StorageStats) float64 { return float64(st.CacheHits) }),
		counter("store_cache_misses_total", "Page lookups that read the page from the database or WAL file, all connections.", func(st store.StorageStats) float64 { return float64(st.CacheMisses) }),
	}
	for mode := range store.CheckpointModes {
		labels := prometheus.Labels{"mode": mode.String()}
		metrics = append(metrics,
			histogram("store_checkpoint_seconds", checkpointSecondsHelp,
				labels, func(st store.StorageStats) store.Histogram { return st.Checkpoints[mode].Seconds }),
			labeledCounter("store_checkpoints_incomplete_total", checkpointIncompleteHelp,
				labels, func(st store.StorageStats) float64 { return float64(st.Checkpoints[mode].Incomplete) }),
			labeledCounter("store_checkpoint_errors_total", checkpointErrorsHelp,
				labels, func(st store.StorageStats) float64 { return float64(st.Checkpoints[mode].Errors) }),
		)
	}
	return m.reg.Register(&snapshotCollector[store.StorageStats]{stats: infallible(s.StorageStats), metrics: metrics})
}
