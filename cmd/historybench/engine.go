package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/historyd/historyd/internal/store/sqlite"
)

// The engines behind HistoryService (issue 14): every historyd the bench starts names its engine,
// so that none serves from the default ./data, and a sqlite one gets a temporary data directory of
// its own.

// memoryFlags are the flags of a memory-engine server: the bench's own settings (cfg.ServerFlags,
// the memory engine's budgets) on --store memory.
func (b *bench) memoryFlags() []string {
	return append([]string{"--store", "memory"}, b.cfg.ServerFlags...)
}

// sqliteFlags are the flags of a sqlite-engine server on dir with the durability mode sync
// ("normal" or "full") and the bench's cache settings (-sqlite-cache, -sqlite-readers), which
// the memory figures are bounded by.
func (b *bench) sqliteFlags(dir, sync string) []string {
	// Not cfg.ServerFlags: they are the memory engine's budgets, which historyd refuses beside
	// --store sqlite.
	return []string{"--store", "sqlite", "--data-dir", dir, "--sync", sync,
		"--sqlite-cache", strconv.FormatInt(b.cfg.SQLiteCache, 10), "--sqlite-readers", strconv.Itoa(b.cfg.SQLiteReaders)}
}

// cacheBytes is the page cache the sqlite engine may hold: one cache per connection, the readers'
// (-sqlite-cache each) and the writer's (at most sqlite.WriteCacheMaxKiB).
func (c config) cacheBytes() int64 {
	return c.SQLiteCache*int64(c.SQLiteReaders) + c.writerCacheBytes()
}

// writerCacheBytes is the write connection's page cache.
func (c config) writerCacheBytes() int64 { return min(c.SQLiteCache, sqlite.WriteCacheMaxKiB<<10) }

// sqliteServer is a historyd on the sqlite engine in a temporary data directory, removed when it
// stops.
type sqliteServer struct {
	*historyd
	Dir string
}

// startSQLite starts a sqlite-engine historyd with sync on a new temporary data directory.
func (b *bench) startSQLite(ctx context.Context, sync string) (*sqliteServer, error) {
	dir, err := os.MkdirTemp("", "historybench-sqlite-")
	if err != nil {
		return nil, err
	}
	h, err := startHistoryd(ctx, b.bin, b.sqliteFlags(dir, sync)...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &sqliteServer{historyd: h, Dir: dir}, nil
}

// stop stops the server and removes its data directory.
func (s *sqliteServer) stop() error {
	err := s.historyd.stop()
	if rerr := os.RemoveAll(s.Dir); err == nil {
		err = rerr
	}
	return err
}

// dirBytes is the size of the regular files in dir: the database, its WAL and shared-memory
// index while they exist, and the lock file.
func dirBytes(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			return 0, err
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n, nil
}

// mib formats bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
