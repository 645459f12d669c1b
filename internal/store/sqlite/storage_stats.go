package sqlite

import (
	"context"
	"database/sql"
	"os"
	"time"

	"github.com/historyd/historyd/internal/store"
)

// StorageStats returns the storage metrics (issue 15): the writer's
// transaction, batch and checkpoint histograms, the sizes of the database
// file and of its WAL, and the page cache hits and misses of every
// connection.
func (s *Store) StorageStats() store.StorageStats {
	var st store.StorageStats
	s.w.storage.snapshot(&st)
	hits, misses := s.db.readCacheCounters()
	st.CacheHits += hits
	st.CacheMisses += misses
	st.DatabaseBytes = fileSize(s.db.Path)
	st.WALBytes = fileSize(s.db.Path + "-wal")
	return st
}

// fileSize is the size of the file at path; 0 when there is none (no WAL
// after a truncating checkpoint or a clean close).
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// cacheReadWait bounds how long a scrape waits for the read pool's idle
// connections.
const cacheReadWait = 10 * time.Millisecond

// readCacheCounters adds what the read pool's idle connections counted
// since they were last read to the pool's totals, and returns the totals.
// Each connection is held while the next is taken, so each is read once;
// one in use keeps its counts for a later scrape: a scrape neither waits
// for a long read nor holds the readers up for more than cacheReadWait.
// The counts of a connection the pool closes since its last read are
// lost (the pool keeps its connections open: none in normal running).
func (db *DB) readCacheCounters() (hits, misses int64) {
	db.cacheMu.Lock()
	defer db.cacheMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cacheReadWait)
	defer cancel()
	idle := db.read.Stats().Idle
	conns := make([]*sql.Conn, 0, idle)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range idle {
		c, err := db.read.Conn(ctx)
		if err != nil {
			break
		}
		conns = append(conns, c)
		_ = c.Raw(func(dc any) error {
			h, m, _ := pageCounters(dc)
			db.readHits += int64(h)
			db.readMisses += int64(m)
			return nil
		})
	}
	return db.readHits, db.readMisses
}
