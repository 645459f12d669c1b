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
	"syscall"

	"github.com/historyd/historyd/internal/store"
)

// backupPattern names the temporary copies Backup writes in the data
// directory (os.CreateTemp's pattern): beside the database, so that the
// copy needs no other volume, and recognisable, so that one a crash left
// behind is removed when the store next opens (OpenStore): hidden, and a
// name no operator gives a backup of their own, which that would delete.
const backupPattern = ".historyd-backup-*.tmp"

// backupMarginMin is the least free space a backup leaves for live writes
// (backupSpace).
const backupMarginMin = 64 << 20

// Backup writes a consistent copy of the database to w and returns its
// size (issue 15: "historyd backup --to FILE makes a consistent copy of a
// running server's data"). The copy is SQLite's VACUUM INTO run on a read
// connection: one read transaction, so it holds every write acknowledged
// before the call and, of the writes that race it, whole commits only;
// writers go on meanwhile (WAL readers do not block the writer). It is
// written first to a temporary file in the data directory and then copied
// to w (bounded memory whatever the size). The temporary copy needs the
// database's live size free on the data directory's volume, and live
// writes need room beside it, so a backup that would leave less than a
// margin free is refused before it writes anything (backupSpace), and one
// that fills the volume anyway fails as a full disk: a *StorageError, as
// writes do. The temporary file is removed before Backup returns, whether
// it succeeded, failed, ctx ended or Close cancelled it. One backup runs
// at a time: a second is refused with store.ErrBackupInProgress.
//
// The copy is a plain SQLite database with this engine's schema:
// historyd serves it when it is a data directory's FileName.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if !s.backup.TryLock() {
		if s.closed.Load() { // Close holds the lock for good
			return 0, ErrClosed
		}
		return 0, store.ErrBackupInProgress
	}
	defer s.backup.Unlock()
	if s.closed.Load() { // Close began after the first check: it waits for this lock
		return 0, ErrClosed
	}
	// Close cancels a running backup (closing s.stop: VACUUM INTO is
	// interrupted, the copy stops at its next read), then waits for it to
	// remove its temporary copy, so none outlives the store.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	n, err := s.backupTo(ctx, w)
	if err != nil && s.closed.Load() && !errors.Is(err, ErrClosed) {
		return n, fmt.Errorf("%w: it cancelled the backup (%v)", ErrClosed, err)
	}
	return n, err
}

// backupTo is Backup once it holds the store's one backup.
func (s *Store) backupTo(ctx context.Context, w io.Writer) (int64, error) {
	dir := filepath.Dir(s.db.Path)
	conn, err := openReadOnly(s.db.Path)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := s.checkBackupSpace(ctx, conn, dir); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(dir, backupPattern)
	if err != nil {
		return 0, fmt.Errorf("sqlite: backup: %w", err)
	}
	defer os.Remove(f.Name()) //nolint:errcheck // best effort: the next OpenStore removes a leftover
	defer f.Close()
	// CreateTemp made the file empty, which VACUUM INTO accepts; f's
	// descriptor then reads what SQLite writes through its own.
	if _, err := conn.ExecContext(ctx, "VACUUM INTO ?", f.Name()); err != nil {
		return 0, s.backupFault(f.Name(), errors.Join(ctx.Err(), err))
	}
	n, err := io.Copy(w, backupReader{ctx, s.stop, f})
	if err != nil {
		return n, fmt.Errorf("sqlite: backup: sending the copy: %w", err)
	}
	return n, nil
}

// openReadOnly opens the database at path on a connection of its own,
// read-only, for VACUUM INTO: the read pool's connections are query_only,
// which refuses VACUUM INTO, and lifting that on a pooled connection would
// risk returning it writable.
func openReadOnly(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(10000)")
	conn, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: backup: %w", err)
	}
	conn.SetMaxOpenConns(1)
	return conn, nil
}

// checkBackupSpace refuses a backup whose temporary copy would leave the
// volume under dir without room for live writes: a *StorageError of
// store.ErrStorageFull (RESOURCE_EXHAUSTED, STORAGE_FULL) naming dir and
// the figures. The copy is about the database's live size, its pages less
// the free ones (VACUUM INTO leaves the free pages out); the margin kept
// beside it is the larger of 64 MiB and a tenth of that size, because the
// backup's read transaction pins the WAL: a checkpoint cannot restart it
// past the copy's snapshot, so every write made while the copy is written
// grows the WAL, and the writes after it need room until the copy is
// removed.
func (s *Store) checkBackupSpace(ctx context.Context, conn *sql.DB, dir string) error {
	var pages, freePages, pageSize int64
	err := conn.QueryRowContext(ctx,
		"SELECT p.page_count, f.freelist_count, s.page_size FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() s",
	).Scan(&pages, &freePages, &pageSize)
	if err != nil {
		return s.backupFault(s.db.Path, errors.Join(ctx.Err(), err))
	}
	live := (pages - freePages) * pageSize
	margin := max(backupMarginMin, live/10)
	free, err := s.cfg.freeSpace(dir)
	if err != nil {
		return fmt.Errorf("sqlite: backup: the free space in %s: %w", dir, err)
	}
	if free < live+margin {
		return &StorageError{File: s.db.Path, Err: store.ErrStorageFull, Cause: &backupSpaceError{Dir: dir, Free: free, Live: live, Margin: margin}}
	}
	return nil
}

// backupSpaceError is the cause of a backup refused for want of space:
// the figures checkBackupSpace compared.
type backupSpaceError struct {
	Dir                string
	Free, Live, Margin int64
}

func (e *backupSpaceError) Error() string {
	return fmt.Sprintf("a backup was refused before it began: its temporary copy in %s needs %d bytes free, the database's %d live bytes plus %d kept free for live writes (the larger of 64 MiB and a tenth of the database), and %d bytes are free",
		e.Dir, e.Live+e.Margin, e.Live, e.Margin, e.Free)
}

// backupFault words an error of the backup's SQLite connection: a full
// disk or an I/O error (SQLite's result codes, storageClass) as the
// *StorageError a write meets, naming the database file and, in its cause,
// the file the backup was at; anything else as it is. Unlike a write's
// fault it leaves the store's health alone: the backup's own connection
// and its copy failed, not the writer's database.
func (s *Store) backupFault(file string, err error) error {
	class := storageClass(err)
	if class == nil {
		return fmt.Errorf("sqlite: backup into %s: %w", file, err)
	}
	return &StorageError{File: s.db.Path, Err: class, Cause: fmt.Errorf("backup into %s: %w", file, err)}
}

// statfsFree returns the bytes an unprivileged writer may use on the
// volume under dir: the default StoreConfig.freeSpace.
func statfsFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil //nolint:unconvert,gosec // the field types differ by platform; a volume's size fits an int64
}

// removeBackups removes the temporary copies in dir.
func removeBackups(dir string) error {
	left, err := filepath.Glob(filepath.Join(dir, backupPattern))
	if err != nil {
		return err
	}
	for _, f := range left {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sqlite: removing a backup's leftover temporary copy: %w", err)
		}
	}
	return nil
}

// backupReader reads the temporary copy until ctx ends (the client went
// away) or the store closes (stop), whichever is first.
type backupReader struct {
	ctx  context.Context
	stop <-chan struct{}
	r    io.Reader
}

func (r backupReader) Read(p []byte) (int, error) {
	select {
	case <-r.stop:
		return 0, fmt.Errorf("%w: it cancelled the backup while the copy was sent", ErrClosed)
	default:
	}
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
