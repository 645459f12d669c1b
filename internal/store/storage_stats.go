package store

// StorageStats is what a durable engine reports about its storage, for monitoring (issue 15:
// "Storage metrics: write transaction latency and commits per fsync (histograms), database and
// WAL size, checkpoint duration, cache hit ratio"). historyd's metrics read it at each scrape;
// this package knows nothing of them. The memory engine has none.
type StorageStats struct {
	// WriteTransaction is the seconds from a write transaction's begin to its commit's end, one
	// observation per committed transaction (a group commit's batch), not per write.
	WriteTransaction Histogram
	// CommitWrites is the writes each committed transaction carried: with --sync=full a commit is
	// one fsync of the WAL, so this is the writes per fsync; with --sync=normal, the writes per
	// commit (the WAL is fsynced at checkpoints only).
	CommitWrites Histogram
	// Checkpoints are the WAL checkpoints run, by mode (CheckpointMode indexes it): passive ones
	// after a commit each time about a thousand pages have been written to the WAL; restarting
	// (or truncating, when the WAL is far over) ones when readers that never pause keep the WAL
	// from being reused; truncating ones when writes have paused, to give the WAL file's space
	// back.
	Checkpoints [CheckpointModes]CheckpointStats
	// DatabaseBytes and WALBytes are the sizes of the database file and of its write-ahead log.
	DatabaseBytes int64
	WALBytes      int64
	// CacheHits and CacheMisses count the page lookups the connections' page caches answered and
	// those that read the page from the files, since the store opened.
	CacheHits   int64
	CacheMisses int64
}

// A CheckpointMode is a kind of WAL checkpoint: an index of StorageStats.Checkpoints.
type CheckpointMode int

const (
	CheckpointPassive CheckpointMode = iota
	CheckpointRestart
	CheckpointTruncate
	CheckpointModes // how many modes there are
)

// String is the mode's name, as the metrics label it.
func (m CheckpointMode) String() string {
	return [CheckpointModes]string{"passive", "restart", "truncate"}[m]
}

// CheckpointStats is what the checkpoints of one mode did.
type CheckpointStats struct {
	// Seconds is the time each one took, failed ones included.
	Seconds Histogram
	// Incomplete counts those that ran but did not do all of their work: pages left uncopied (a
	// reader's snapshot still needed them) or, restarting and truncating, readers still on the
	// WAL at the end of the wait, so it is not reset.
	Incomplete uint64
	// Errors counts those that failed (an I/O error, a full disk): not counted in Incomplete.
	Errors uint64
}

// Histogram is a snapshot of a histogram: Buckets[i] counts the observations <= Bounds[i]
// (cumulative, as Prometheus has them); Count counts every observation, those above the last
// bound included, and Sum adds them up.
type Histogram struct {
	Bounds  []float64
	Buckets []uint64
	Count   uint64
	Sum     float64
}
