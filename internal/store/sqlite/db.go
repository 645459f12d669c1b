package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"

	_ "modernc.org/sqlite" // the pure-Go driver, registered as "sqlite"

	"github.com/historyd/historyd/internal/store/migrations"
)

// FileName is the database's file in the data directory.
const FileName = "historyd.db"

// Sync is a durability mode (issue 14): what an acknowledged write
// survives.
type Sync string

const (
	// SyncNormal (the default): an acknowledged write survives kill -9 of
	// historyd (it is in the WAL, which the OS keeps); an OS crash or a
	// power loss may lose the last moments (SQLite's synchronous=NORMAL in
	// WAL mode fsyncs at checkpoints, not at commits).
	SyncNormal Sync = "normal"
	// SyncFull: an acknowledged write has been fsynced
	// (synchronous=FULL: the WAL is synced at every commit; group commit
	// makes concurrent writers share that fsync).
	SyncFull Sync = "full"
)

// ParseSync reads a --sync value.
func ParseSync(s string) (Sync, error) {
	switch Sync(s) {
	case SyncNormal, SyncFull:
		return Sync(s), nil
	case "":
		return SyncNormal, nil
	}
	return "", fmt.Errorf("--sync: want normal or full, got %q", s)
}

// pragma returns the synchronous pragma value of a mode.
func (s Sync) pragma() string {
	if s == SyncFull {
		return "FULL"
	}
	return "NORMAL"
}

// Config says where the database is and how it is opened.
type Config struct {
	// Dir is the data directory, created 0700 when missing.
	Dir string
	// Sync is the durability mode; "" is SyncNormal.
	Sync Sync
	// NoAutoMigrate refuses a database with pending migrations instead of
	// applying them (--auto-migrate=false).
	NoAutoMigrate bool
	// CacheKiB is SQLite's page cache per connection, in KiB (0: 8192);
	// the write connection's is at most WriteCacheMaxKiB.
	CacheKiB int
	// Readers is the number of read connections (0: 4).
	Readers int
	// MaxBytes bounds the database file's size (--max-db-bytes; 0: no
	// limit): SQLite's max_page_count on the write connection, so a write
	// that would grow it further fails with SQLITE_FULL, like a full disk.
	MaxBytes int64
}

// DB is an open data directory: its lock, one write connection and a pool
// of read connections over the same WAL database.
type DB struct {
	Path     string
	maxBytes int64 // Config.MaxBytes
	// sizeAtOpen is the database's size when it opened, measured only
	// when MaxBytes is set (OverMaxBytes).
	sizeAtOpen int64
	// write is the write pool, of one connection, until the writer takes
	// that connection (takeWrite); nil from then on.
	write      *sql.DB
	closeWrite func() error // closes the write pool once the writer took it
	read       *sql.DB
	// checkpointDSN opens the checkpointer's connection (checkpoint.go):
	// the write connection's settings (its synchronous mode: the
	// checkpoint's fsyncs), without its limit or its cache.
	checkpointDSN string
	lock          *dirLock
	closed        bool

	// The read connections' page cache counts so far (storage_stats.go).
	readHits   atomic.Int64
	readMisses atomic.Int64
}

// busyTimeoutMS is how long a connection waits for a lock another holds.
const busyTimeoutMS = 10000

// WriteCacheMaxKiB caps the write connection's page cache (issues 14 and 17).
// At the end of every write transaction SQLite truncates the connection's page
// cache to the database's size (pager_end_transaction -> sqlite3PcacheTruncate),
// and pcache1 does it by scanning its whole hash table (about one slot and one
// page header per cached page) whenever its highest page number ever cached
// passed the database's end by more than the table's size. That happens in
// most commits here: balance_nonroot, when it puts the new sibling pages of a
// split in ascending order, swaps two of them through a temporary page number,
// the pending-byte page (1 GiB / page size + 1: 262145 at 4 KiB pages), which
// is past the end of any database under 1 GiB; the cache's high-water mark
// stays there until the commit's truncate. Any b-tree filled in its middle
// does such splits: the messages' primary key (random ids) and every index
// that 50 branches append to at once. The scan's cost grows with the cache,
// so the writer's is kept small: it touches the right edges of the branches
// it writes to and the leaves of their random-key index, while the reads run
// on the read connections, which keep --sqlite-cache. Figures (in-process,
// 1 KB AddMessage from 50 writers, --sqlite-cache 32 MiB): 56 cpu-µs a write
// with a 32 MiB writer cache, 51-54 with 8 MiB; the writer's cache misses a
// write, 10 branches of 20k messages each: 0.13 with 32 MiB, 0.61 with 8 MiB.
const WriteCacheMaxKiB = 8192

// dsn returns the driver's data source name for the database file;
// maxPages > 0 sets max_page_count (on every connection the pool opens).
func dsn(path string, sync Sync, cacheKiB int, readOnly bool, maxPages int64) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync.pragma()+")")
	q.Add("_pragma", "foreign_keys(0)")
	q.Add("_pragma", fmt.Sprintf("cache_size(-%d)", cacheKiB))
	// Every connection opens the files through the historyd VFS (walvfs.go: unix's, with a
	// commit's WAL frames written in one call); registerWALVFS must have run.
	q.Set("vfs", walVFSName)
	if maxPages > 0 {
		q.Add("_pragma", fmt.Sprintf("max_page_count(%d)", maxPages))
	}
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
		// Each write of a batch runs under a savepoint (writer.go), whose statement journal
		// copies every page the write first touches: in a temporary file that cost a write(2)
		// per page (issue 17: a third of an Exchange write's time). In memory, it is bounded by
		// the pages one write touches and gone at its release.
		q.Add("_pragma", "temp_store(MEMORY)")
		// The writer checkpoints, between batches, to time it (checkpoint.go).
		q.Add("_pragma", "wal_autocheckpoint(0)")
	}
	return "file:" + path + "?" + q.Encode()
}

// Open locks the data directory (a second process is refused with a
// *LockError naming it), opens the database in WAL mode and brings its
// schema up to date (or, with NoAutoMigrate, refuses pending migrations).
// A database whose schema is newer than this server is refused with both
// versions named.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	if cfg.Dir == "" {
		return nil, errors.New("sqlite: no data directory")
	}
	if err := registerWALVFS(); err != nil {
		return nil, err
	}
	sync, err := ParseSync(string(cfg.Sync))
	if err != nil {
		return nil, err
	}
	cache := cfg.CacheKiB
	if cache <= 0 {
		cache = 8192
	}
	readers := cfg.Readers
	if readers <= 0 {
		readers = 4
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.Dir, FileName)
	db := &DB{Path: path, lock: lock, maxBytes: cfg.MaxBytes}
	fail := func(err error) (*DB, error) {
		db.Close()
		return nil, openError(path, err)
	}
	openWrite := func(maxPages int64) error {
		if db.write, err = sql.Open("sqlite", dsn(path, sync, min(cache, WriteCacheMaxKiB), false, maxPages)); err != nil {
			return err
		}
		// One writer: SQLite has one, and the group-commit goroutine is it.
		db.write.SetMaxOpenConns(1)
		db.write.SetConnMaxIdleTime(0)
		if err := db.write.PingContext(ctx); err != nil {
			return fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		return nil
	}
	if err := checkOwner(ctx, path); err != nil {
		return fail(err)
	}
	if err := openWrite(0); err != nil {
		return fail(err)
	}
	if cfg.NoAutoMigrate {
		err = migrations.Check(ctx, migrations.SQLite, db.write)
	} else {
		_, err = migrations.Up(ctx, migrations.SQLite, db.write)
	}
	if err != nil {
		return fail(err)
	}
	if cfg.MaxBytes > 0 {
		// max_page_count counts pages of the file's page size, known once
		// it is open; the write connection is reopened with it in the
		// DSN, so a connection the pool replaces keeps the limit.
		var pageSize, pages int64
		if err := db.write.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
			return fail(err)
		}
		if err := db.write.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
			return fail(err)
		}
		db.sizeAtOpen = pages * pageSize
		db.write.Close()
		if err := openWrite(max(1, cfg.MaxBytes/pageSize)); err != nil {
			return fail(err)
		}
	}
	db.checkpointDSN = dsn(path, sync, checkpointCacheKiB, false, 0)
	if db.read, err = sql.Open("sqlite", dsn(path, sync, cache, true, 0)); err != nil {
		return fail(err)
	}
	db.read.SetMaxOpenConns(readers)
	db.read.SetMaxIdleConns(readers)
	return db, nil
}

// checkOwner refuses a file that is not historyd's database: one SQLite
// cannot read as a database (SQLITE_NOTADB), or another application's (it
// has tables, and no goose_db_version table for migrations to continue
// from). A missing or empty database is a new one. It reads the schema
// only (the start does not grow with the database), over a read-only
// connection without the write pool's pragmas, which would turn a foreign
// database to WAL mode before it is refused.
func checkOwner(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	var tables, goose int
	err = db.QueryRowContext(ctx,
		"SELECT count(*), count(*) FILTER (WHERE name = 'goose_db_version') FROM sqlite_schema WHERE type = 'table'").Scan(&tables, &goose)
	switch {
	case err != nil:
		return err
	case tables > 0 && goose == 0:
		return &FileError{File: path, Problem: problemForeign}
	}
	return nil
}

// Migrate applies the pending migrations of the database in dir (historyd
// migrate) and returns the versions applied. It takes the directory's
// lock, so it is refused while a server runs on it.
func Migrate(ctx context.Context, dir string) ([]int64, error) {
	if err := registerWALVFS(); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	if err := checkOwner(ctx, filepath.Join(dir, FileName)); err != nil {
		return nil, openError(filepath.Join(dir, FileName), err)
	}
	db, err := sql.Open("sqlite", dsn(filepath.Join(dir, FileName), SyncFull, 2048, false, 0))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	return migrations.Up(ctx, migrations.SQLite, db)
}

// takeWrite takes the write pool's one connection, for the writer, with
// the statements of queries prepared on it first (a statement prepared on
// the pool is bound to each transaction without being prepared again,
// Tx.StmtContext; one prepared on the taken *sql.Conn would be prepared
// again in every transaction). A later use of the pool would wait forever
// for that connection, so db.write is nil from then on: such a use fails
// at once, loudly. Close still closes the pool (the connection goes back
// to it when the writer stops).
func (db *DB) takeWrite(ctx context.Context, queries ...string) (*sql.Conn, []*sql.Stmt, error) {
	if db.write == nil {
		return nil, nil, errors.New("sqlite: the write connection is taken or closed")
	}
	var stmts []*sql.Stmt
	closeAll := func() {
		for _, st := range stmts {
			st.Close()
		}
	}
	for _, q := range queries {
		st, err := db.write.PrepareContext(ctx, q)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		stmts = append(stmts, st)
	}
	conn, err := db.write.Conn(ctx)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	db.closeWrite, db.write = db.write.Close, nil
	return conn, stmts, nil
}

// Close closes the connections (checkpointing the WAL) and releases the
// directory's lock; it is safe to call more than once.
func (db *DB) Close() error {
	if db.closed {
		return nil
	}
	db.closed = true
	var errs []error
	if db.read != nil {
		errs = append(errs, db.read.Close())
	}
	// The write pool after the read pool: the last connection closed
	// checkpoints the WAL and removes it.
	switch {
	case db.write != nil:
		errs = append(errs, db.write.Close())
	case db.closeWrite != nil:
		errs = append(errs, db.closeWrite())
	}
	if db.lock != nil {
		errs = append(errs, db.lock.unlock())
	}
	return errors.Join(errs...)
}

// pragma reads one pragma on a read connection (tests).
func (db *DB) pragma(ctx context.Context, name string) (string, error) {
	var v string
	err := db.read.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v)
	return v, err
}

// OverMaxBytes returns the database's size at open and the limit when the
// size passes the limit (else 0, 0). SQLite keeps max_page_count at the page
// count at least, so such a database cannot grow at all: every write that
// needs a new page fails as full; writes that fit in pages freed by deletes
// go on. The caller warns the operator (historyd logs it at start).
func (db *DB) OverMaxBytes() (size, limit int64) {
	if db.maxBytes > 0 && db.sizeAtOpen > db.maxBytes {
		return db.sizeAtOpen, db.maxBytes
	}
	return 0, 0
}
