package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"path/filepath"
	"testing"
)

// walBuffered is how many bytes the WAL files of the database at path hold unwritten.
func walBuffered(path string) int {
	n := 0
	vfsFiles.Range(func(_, s any) bool {
		if w, ok := s.(*walFile); ok && w.db == path {
			w.mu.Lock()
			n += w.n
			w.mu.Unlock()
		}
		return true
	})
	return n
}

// TestWALVFSCommitsReachTheFile checks the historyd VFS's promise (walvfs.go, docs/decisions/0022):
// a commit's WAL frames are gathered into few writes, and every one of them is in the file when
// COMMIT returns, whatever the transaction's size (one page, more than a buffer, more than the
// page cache, so that SQLite spills frames mid-transaction and rewrites them in place), after a
// rollback of spilled frames, across WAL restarts and truncations, and with --sync=full. A second
// connection, which reads the WAL through a file of its own, sees each commit at once; the
// barrier safety net never fires; the database checks clean and reopens with every row.
func TestWALVFSCommitsReachTheFile(t *testing.T) {
	for _, sync := range []Sync{SyncNormal, SyncFull} {
		t.Run(string(sync), func(t *testing.T) {
			if err := registerWALVFS(); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), FileName)
			// A 64 KiB page cache: a transaction of more than 16 pages spills.
			w, err := sql.Open("sqlite", dsn(path, sync, 64, false, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.SetMaxOpenConns(1)
			if _, err := w.ExecContext(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`); err != nil {
				t.Fatal(err)
			}
			r, err := sql.Open("sqlite", dsn(path, sync, 64, true, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			r.SetMaxOpenConns(1)

			frames0, flushes0, barrier0 := walStats.frames.Load(), walStats.flushes.Load(), walStats.barrierFlushes.Load()
			rows := 0
			write := func(n int, commit bool) {
				t.Helper()
				tx, err := w.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
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
			again, err := sql.Open("sqlite", dsn(path, sync, 64, true, 0))
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
