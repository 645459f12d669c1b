package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// The historyd VFS outside historyd's own settings, and with writes that fail (docs/decisions/0022;
// these cases come from a second review, which reproduced each against the code before holds()).

func openVFSTest(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	if err := registerWALVFS(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func execAll(t *testing.T, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, statements ...string) {
	t.Helper()
	for _, st := range statements {
		if _, err := db.ExecContext(context.Background(), st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
}

// unixDSN is dsn through unix's own VFS: another program on the same database.
func unixDSN(path string, readOnly bool) string {
	return strings.Replace(dsn(path, SyncNormal, 64, readOnly, 0), "vfs="+walVFSName, "vfs=unix", 1)
}

// TestWALVFSExclusiveModeHoldsNothing: in exclusive locking mode the write lock is never released
// through xShmLock, so a rolled-back spill's frames would stay held after the connection left the
// mode, and be written later over another writer's commit (the review: 11 of that writer's 40
// rows left intact, integrity_check "ok"). Nothing is held in that mode.
func TestWALVFSExclusiveModeHoldsNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	a := openVFSTest(t, dsn(path, SyncNormal, 64, false, 0))
	execAll(t, a, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`, `PRAGMA wal_checkpoint(TRUNCATE)`, `PRAGMA locking_mode=EXCLUSIVE`)
	conn, err := a.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	execAll(t, conn, `BEGIN`, spill40, `PRAGMA locking_mode=NORMAL`, `ROLLBACK`)
	if b := walBuffered(path); b != 0 {
		t.Errorf("%d bytes held after the rollback", b)
	}
	conn.Close()
	b := openVFSTest(t, unixDSN(path, false))
	execAll(t, b, strings.Replace(spill40, "randomblob(3000)", "zeroblob(3000)", 1))
	var n int
	if err := a.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	c := openVFSTest(t, unixDSN(path, true))
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM t WHERE v = zeroblob(3000)`).Scan(&n); err != nil || n != 40 {
		t.Fatalf("the other writer's rows intact: %d (%v), want 40", n, err)
	}
}

// injected makes the WAL file of the database at path (its one connection) fail its writes while
// fail holds (fail's rule, on the write's offset), through a copy of its unix methods.
type injected struct {
	fail  func(off int64) bool
	real  uintptr
	fails atomic.Int64
}

var injection atomic.Pointer[injected]

func injectedWrite(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	in := injection.Load()
	if f := in.fail; f != nil && f(iOfst) {
		in.fails.Add(1)
		return sqlite3.SQLITE_IOERR_WRITE
	}
	return goFunc[xReadWriteFn](in.real)(tls, pFile, zBuf, iAmt, iOfst)
}

func injectWriteFailures(t *testing.T, path string) *injected {
	t.Helper()
	vfsFiles.RLock()
	defer vfsFiles.RUnlock()
	for _, s := range vfsFiles.m {
		if w, ok := s.(*walFile); ok && w.db != nil && w.name == path+"-wal" {
			tls := libc.NewTLS()
			defer tls.Close()
			p := cAlloc(tls, unsafe.Sizeof(sqlite3.Tsqlite3_io_methods{}))
			m := (*sqlite3.Tsqlite3_io_methods)(cPtr(p))
			*m = *w.orig
			in := &injected{real: w.orig.FxWrite}
			injection.Store(in)
			m.FxWrite = cFunc(injectedWrite)
			w.orig = m
			return in
		}
	}
	t.Fatal("no WAL file open through the VFS")
	return nil
}

// TestWALVFSFailedFlushFailsItsTransaction: a write of the buffer that fails outside xWrite (a
// read inside the transaction wrote the held spill out) must keep that transaction from
// committing without those frames, and must not outlive it: the next transactions write. In
// exclusive locking mode and with a heap-memory wal-index, where no write lock is released
// through xShmLock, nothing is held, so nothing is kept either (the review: every later write of
// the connection failed).
func TestWALVFSFailedFlushFailsItsTransaction(t *testing.T) {
	for _, mode := range []string{"NORMAL", "EXCLUSIVE", "heap"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), FileName)
			var a *sql.DB
			if mode == "heap" { // exclusive before WAL: the wal-index in heap memory
				a = openVFSTest(t, "file:"+path+"?vfs="+walVFSName+"&_pragma=cache_size(-64)")
				execAll(t, a, `PRAGMA locking_mode=EXCLUSIVE`, `PRAGMA journal_mode=WAL`)
			} else {
				a = openVFSTest(t, dsn(path, SyncNormal, 64, false, 0))
				execAll(t, a, `PRAGMA locking_mode=`+mode)
			}
			execAll(t, a, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`, `INSERT INTO t (v) VALUES (1)`)
			in := injectWriteFailures(t, path)
			conn, err := a.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			execAll(t, conn, `BEGIN`, spill40)
			in.fail = func(int64) bool { return true }
			readErr := conn.QueryRowContext(ctx, `SELECT count(*), sum(length(v)) FROM t`).Scan(new(int), new(int))
			in.fail = nil
			_, commitErr := conn.ExecContext(ctx, `COMMIT`)
			conn.ExecContext(ctx, `ROLLBACK`)
			conn.Close()
			t.Logf("%d writes failed; the read: %v; the commit: %v", in.fails.Load(), readErr, commitErr)
			if mode == "NORMAL" && in.fails.Load() == 0 {
				t.Fatal("no write of the held spill was tried during the read")
			}
			if in.fails.Load() > 0 && readErr == nil && commitErr == nil {
				t.Error("a write of the transaction's frames failed, and it committed")
			}
			for i := range 3 {
				if _, err := a.ExecContext(ctx, `INSERT INTO t (v) VALUES (2)`); err != nil {
					t.Errorf("a later insert %d: %v", i, err)
				}
			}
			var n int
			var check string
			if err := a.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || (n != 4 && n != 44) {
				t.Errorf("%d rows (%v): want 4, or 44 if the transaction committed whole", n, err)
			}
			if err := a.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
				t.Errorf("integrity_check %q, %v", check, err)
			}
		})
	}
}

// TestWALVFSSectorPaddingHoldsNothing: with psow=0 and --sync=full SQLite pads each commit with
// copies of its commit frame to a sector and splits a write at the sync point, so the commit's
// last bytes came after its commit frame's page had written the buffer out, and were left to the
// barrier, whose failed write let COMMIT succeed with a damaged frame (the review). Nothing is
// held then: the barrier never fires, and a failed write of a commit's tail fails the commit.
func TestWALVFSSectorPaddingHoldsNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	a := openVFSTest(t, dsn(path, SyncFull, 64, false, 0)+"&psow=0")
	execAll(t, a, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`)
	barrier0 := walStats.barrierFlushes.Load()
	for range 20 {
		execAll(t, a, `INSERT INTO t (v) VALUES (randomblob(100))`)
	}
	if d := walStats.barrierFlushes.Load() - barrier0; d != 0 {
		t.Fatalf("the barrier wrote held bytes %d times in 20 commits", d)
	}
	in := injectWriteFailures(t, path)
	// A write at a page boundary that is not a frame's header or page: a padding frame's tail,
	// split at the sector.
	in.fail = func(off int64) bool { return off%4096 == 0 && (off-32)%4120 != 0 && (off-56)%4120 != 0 }
	committed := 20
	for range 20 {
		if _, err := a.ExecContext(ctx, `INSERT INTO t (v) VALUES (zeroblob(100))`); err == nil {
			committed++
		}
	}
	in.fail = nil
	t.Logf("%d tails failed, %d rows committed", in.fails.Load(), committed)
	c := openVFSTest(t, unixDSN(path, true))
	var n int
	var check string
	if err := c.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check %q, %v", check, err)
	}
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != committed {
		t.Fatalf("%d rows (%v), %d committed", n, err, committed)
	}
}
