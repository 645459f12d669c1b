package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
)

// walBuffered is how many bytes the WAL files of the database at path hold unwritten.
func walBuffered(path string) int {
	vfsFiles.RLock()
	defer vfsFiles.RUnlock()
	n := 0
	for _, s := range vfsFiles.m {
		if w, ok := s.(*walFile); ok && w.name == path+"-wal" {
			w.mu.Lock()
			n += w.n
			w.mu.Unlock()
		}
	}
	return n
}

// spill40 inserts 40 rows of 3000 bytes: more pages than a 64 KiB page cache holds.
const spill40 = `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 40) INSERT INTO t (v) SELECT randomblob(3000) FROM c`

// TestWALVFSCommitsReachTheFile checks the historyd VFS's promise (walvfs.go, docs/decisions/0022):
// a commit's WAL frames are gathered into few writes, and every one of them is in the file when
// COMMIT returns, whatever the transaction's size (one page, more than a buffer, more than the
// page cache, so that SQLite spills frames mid-transaction and rewrites them in place), after a
// rollback of spilled frames (of the transaction, or to a savepoint within it), across WAL
// restarts and truncations, and with --sync=full. A second connection, which reads the WAL
// through a file of its own, sees each commit at once; the barrier safety net never fires, though
// other readers start read transactions all along; the database checks clean and reopens with
// every row.
func TestWALVFSCommitsReachTheFile(t *testing.T) {
	for _, syncMode := range []Sync{SyncNormal, SyncFull} {
		t.Run(string(syncMode), func(t *testing.T) {
			if err := registerWALVFS(); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), FileName)
			// A 64 KiB page cache: a transaction of more than 16 pages spills.
			w, err := sql.Open("sqlite", dsn(path, syncMode, 64, false, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.SetMaxOpenConns(1)
			if _, err := w.ExecContext(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`); err != nil {
				t.Fatal(err)
			}
			r, err := sql.Open("sqlite", dsn(path, syncMode, 64, true, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			r.SetMaxOpenConns(1)

			// Readers on connections of their own start read transactions all along (each a
			// barrier on their database file), while the writer's buffer holds frames.
			others, err := sql.Open("sqlite", dsn(path, syncMode, 64, true, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer others.Close()
			others.SetMaxOpenConns(2)
			readCtx, stopReading := context.WithCancel(ctx)
			var readers sync.WaitGroup
			for range 2 {
				readers.Go(func() {
					for readCtx.Err() == nil {
						var n int
						if err := others.QueryRowContext(readCtx, `SELECT count(*) FROM t`).Scan(&n); err != nil && readCtx.Err() == nil {
							t.Errorf("a reader: %v", err)
							return
						}
					}
				})
			}
			defer readers.Wait()
			defer stopReading()

			frames0, flushes0, barrier0 := walStats.frames.Load(), walStats.flushes.Load(), walStats.barrierFlushes.Load()
			rows := 0
			write := func(n int, commit bool) {
				t.Helper()
				tx, err := w.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				// historyd's batches: a write under a savepoint that spills and is rolled back
				// to it, the rest of the transaction going on.
				for _, st := range []string{`SAVEPOINT s`, spill40, `ROLLBACK TO s`, `RELEASE s`} {
					if _, err := tx.ExecContext(ctx, st); err != nil {
						t.Fatal(err)
					}
				}
				for range n {
					v := make([]byte, 3000)
					rand.Read(v)
					if _, err := tx.ExecContext(ctx, `INSERT INTO t (v) VALUES (?)`, v); err != nil {
						t.Fatal(err)
					}
				}
				// Rows of the spill rewritten in place within the transaction.
				if _, err := tx.ExecContext(ctx, `UPDATE t SET v = randomblob(3000) WHERE k % 7 = 0 AND k > ?`, rows); err != nil {
					t.Fatal(err)
				}
				if !commit {
					if err := tx.Rollback(); err != nil {
						t.Fatal(err)
					}
				} else {
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
					rows += n
				}
				if b := walBuffered(path); b != 0 {
					t.Fatalf("after a transaction of %d rows (commit %v): %d bytes of the WAL still unwritten", n, commit, b)
				}
				var got int
				if err := r.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != rows {
					t.Fatalf("after a transaction of %d rows (commit %v): the reader sees %d rows, want %d", n, commit, got, rows)
				}
			}
			for _, n := range []int{1, 2, 29, 31, 60} {
				write(n, true)
			}
			write(200, false) // spills, then rolls back
			write(3, true)
			for _, mode := range []string{"RESTART", "TRUNCATE", "PASSIVE"} {
				if _, err := w.ExecContext(ctx, `PRAGMA wal_checkpoint(`+mode+`)`); err != nil {
					t.Fatal(err)
				}
				write(5, true)
				write(120, true)
			}
			stopReading()
			readers.Wait()
			var check string
			if err := r.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
				t.Fatalf("integrity_check: %q, %v", check, err)
			}
			frames, flushes := walStats.frames.Load()-frames0, walStats.flushes.Load()-flushes0
			if b := walStats.barrierFlushes.Load() - barrier0; b != 0 {
				t.Errorf("the barrier found unwritten frames %d times, want 0", b)
			}
			t.Logf("%d rows: %d frames buffered, written in %d calls", rows, frames, flushes)
			if frames == 0 || flushes*4 > frames {
				t.Errorf("%d frames written in %d calls: not gathered", frames, flushes)
			}

			// A new process's view: the WAL read back by recovery.
			r.Close()
			w.Close()
			again, err := sql.Open("sqlite", dsn(path, syncMode, 64, true, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			var got int
			if err := again.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&got); err != nil || got != rows {
				t.Fatalf("reopened: %d rows (%v), want %d", got, err, rows)
			}
		})
	}
}

// TestWALVFSRolledBackSpillWrittenAtItsEnd: frames a transaction spilled and then rolled back are
// written before its write lock is released, as unix's VFS writes them at the spill, never
// later: another writer (here a connection through unix's VFS, as the sqlite3 shell would be)
// appends its frames where they lay, and a later write of them would land on its commit. A
// review reproduced that: "file is not a database" on the next read.
func TestWALVFSRolledBackSpillWrittenAtItsEnd(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	a := openVFSTest(t, dsn(path, SyncNormal, 64, false, 0))
	execAll(t, a, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`, `PRAGMA wal_checkpoint(TRUNCATE)`)
	tx, err := a.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, spill40); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if b := walBuffered(path); b != 0 {
		t.Fatalf("after the rollback, %d bytes of the WAL still unwritten", b)
	}
	b := openVFSTest(t, unixDSN(path, false))
	execAll(t, b, spill40)
	var n int
	var check string
	if err := a.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 40 {
		t.Fatalf("after the other writer's commit: %d rows (%v), want 40", n, err)
	}
	if err := a.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
}
