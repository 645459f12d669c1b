package sqlite

import (
	"database/sql"
	"os"

	"github.com/historyd/historyd/internal/store"
)

// StorageStats returns the storage metrics (issue 15): the writer's
// transaction, batch and checkpoint histograms, the sizes of the database
// file and of its WAL, and the page cache hits and misses of every
// connection.
func (s *Store) StorageStats() store.StorageStats {
	var st store.StorageStats
	s.w.storage.snapshot(&st)
	st.CacheHits += s.db.readHits.Load()
	st.CacheMisses += s.db.readMisses.Load()
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

// countReads adds the page cache counts of conn, a read connection, to
// the read pool's totals, and gives conn back to the pool. Every read
// transaction ends with it (Store.read), so the counts are taken where the
// reads ran and a scrape only loads the totals. A scrape that took the
// pool's connections to read their counters instead would hold each one
// it took while taking the next, so a read would wait for the scrape, and
// the scrape for a long read. It costs each read transaction three
// sqlite3_db_status calls. Reads outside a transaction (a single
// statement on the pool) are counted by the next transaction on their
// connection; a connection the pool closes loses what it counted since
// (the pool keeps its connections open: none in normal running).
func (db *DB) countReads(conn *sql.Conn) {
	_ = conn.Raw(func(dc any) error {
		hits, misses, _ := pageCounters(dc)
		db.readHits.Add(int64(hits))
		db.readMisses.Add(int64(misses))
		return nil
	})
	conn.Close()
}
