package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/historyd/historyd/internal/store"
)

// backupPattern names the temporary copies Backup writes in the data
// directory (os.CreateTemp's pattern): beside the database, so that the
// copy needs no other volume, and recognisable, so that one a crash left
// behind is removed by the next backup.
const backupPattern = "historyd-backup-*.db"

// Backup writes a consistent copy of the database to w and returns its
// size (issue 15: "historyd backup --to FILE makes a consistent copy of a
// running server's data"). The copy is SQLite's VACUUM INTO run on a read
// connection: one read transaction, so it holds every write acknowledged
// before the call and, of the writes that race it, whole commits only;
// writers go on meanwhile (WAL readers do not block the writer). It is
// written first to a temporary file in the data directory, so a backup
// needs free space about the database's size there, and then copied to w
// (bounded memory whatever the size); the temporary file is removed before
// Backup returns, whether it succeeded, failed or ctx ended. One backup
// runs at a time: a second is refused with store.ErrBackupInProgress.
//
// The copy is a plain SQLite database with this engine's schema:
// historyd serves it when it is a data directory's FileName.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if !s.backup.TryLock() {
		return 0, store.ErrBackupInProgress
	}
	defer s.backup.Unlock()
	dir := filepath.Dir(s.db.Path)
	// The directory's lock is this process's and no other backup runs in
	// it, so any copy there is one a crash left behind.
	if err := removeBackups(dir); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(dir, backupPattern)
	if err != nil {
		return 0, fmt.Errorf("sqlite: backup: %w", err)
	}
	defer os.Remove(f.Name()) //nolint:errcheck // best effort: the next backup removes a leftover
	defer f.Close()
	if err := vacuumInto(ctx, s.db.Path, f.Name()); err != nil {
		return 0, err
	}
	n, err := io.Copy(w, readerCtx{ctx, f})
	if err != nil {
		return n, fmt.Errorf("sqlite: backup: sending the copy: %w", err)
	}
	return n, nil
}

// vacuumInto writes a consistent copy of the database at path into the
// file to (missing or empty: CreateTemp made an empty one, whose descriptor
// then reads what SQLite writes through its own). It runs on a connection
// of its own, opened read-only: the read pool's are query_only, which
// refuses VACUUM INTO, and lifting that on a pooled connection would risk
// returning it writable.
func vacuumInto(ctx context.Context, path, to string) error {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(10000)")
	conn, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("sqlite: backup: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "VACUUM INTO ?", to); err != nil {
		return fmt.Errorf("sqlite: backup into %s: %w", to, errors.Join(ctx.Err(), err))
	}
	return nil
}

// removeBackups removes the temporary copies in dir.
func removeBackups(dir string) error {
	left, err := filepath.Glob(filepath.Join(dir, backupPattern))
	if err != nil {
		return err
	}
	for _, f := range left {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sqlite: backup: removing a leftover copy: %w", err)
		}
	}
	return nil
}

// readerCtx is a reader that stops once ctx ends, so that a backup whose
// client went away stops reading its copy.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
