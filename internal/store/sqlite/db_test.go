package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/store/migrations"
)

func openT(t *testing.T, cfg Config) *DB {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "data")
	}
	db, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// issue 14: "WAL mode"; --sync=normal|full set SQLite's synchronous.
func TestOpenWALAndSync(t *testing.T) {
	for _, tc := range []struct {
		sync Sync
		want string // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{{"", "1"}, {SyncNormal, "1"}, {SyncFull, "2"}} {
		t.Run(string(tc.sync), func(t *testing.T) {
			db := openT(t, Config{Sync: tc.sync})
			ctx := context.Background()
			if mode, err := db.pragma(ctx, "journal_mode"); err != nil || mode != "wal" {
				t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
			}
			if s, err := db.pragma(ctx, "synchronous"); err != nil || s != tc.want {
				t.Fatalf("synchronous = %q, %v; want %s", s, err, tc.want)
			}
		})
	}
	if _, err := ParseSync("sometimes"); err == nil {
		t.Fatal("ParseSync accepted an unknown mode")
	}
}

// issue 14: "--data-dir ... created 0700"; "A second historyd on the same
// data dir is refused at start (an exclusive lock; one line naming the
// directory)".
func TestDataDirLocked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	db := openT(t, Config{Dir: dir})
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode = %v, %v; want 0700", st.Mode().Perm(), err)
	}
	_, err = Open(context.Background(), Config{Dir: dir})
	var le *LockError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want a LockError", err)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || strings.Contains(msg, "\n") {
		t.Fatalf("%q: want one line naming %s", msg, dir)
	}
	if _, err := Migrate(context.Background(), dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Migrate while open = %v, want ErrLocked", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	openT(t, Config{Dir: dir}) // the lock went with Close
}

// issue 14: "historyd migrate applies them; the server applies pending ones
// at start unless --auto-migrate=false"; a newer schema is refused naming
// both versions.
func TestMigrationsAtOpen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := Open(ctx, Config{Dir: dir, NoAutoMigrate: true}); !errors.Is(err, migrations.ErrPending) {
		t.Fatalf("Open(NoAutoMigrate) on a new database = %v, want ErrPending", err)
	}
	applied, err := Migrate(ctx, dir)
	if err != nil || len(applied) == 0 {
		t.Fatalf("Migrate = %v, %v", applied, err)
	}
	db := openT(t, Config{Dir: dir, NoAutoMigrate: true})
	if _, err := db.write.ExecContext(ctx, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (42, 1)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(ctx, Config{Dir: dir})
	if !errors.Is(err, migrations.ErrSchemaTooNew) || !strings.Contains(err.Error(), "42") {
		t.Fatalf("Open on a newer schema = %v, want ErrSchemaTooNew naming 42", err)
	}
}

// issues 14 and 17: the write connection's page cache is at most
// WriteCacheMaxKiB (the truncate at each commit scans it); the read
// connections keep CacheKiB, and a smaller CacheKiB holds for both.
func TestWriteCacheCapped(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ cache, write, read int }{
		{32768, WriteCacheMaxKiB, 32768},
		{1024, 1024, 1024},
	} {
		db := openT(t, Config{CacheKiB: tc.cache})
		var w int
		if err := db.write.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&w); err != nil || w != -tc.write {
			t.Fatalf("CacheKiB %d: the writer's cache_size = %d, %v; want -%d", tc.cache, w, err, tc.write)
		}
		if r, err := db.pragma(ctx, "cache_size"); err != nil || r != fmt.Sprint(-tc.read) {
			t.Fatalf("CacheKiB %d: a reader's cache_size = %s, %v; want -%d", tc.cache, r, err, tc.read)
		}
		db.Close()
	}
}
