package sqlite

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/historyd/historyd/internal/store"
)

// leftovers returns the temporary backup copies in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, backupPattern))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// TestBackupRestores: issue 15, "restore is starting historyd on the copy": the copy, put in an
// empty data directory as FileName, opens as a store that exports the branch byte for byte, and
// the temporary copy is gone.
func TestBackupRestores(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	id := conversation(t, s)
	before := exportAll(t, s, id)

	var copied bytes.Buffer
	n, err := s.Backup(tctx(t), &copied)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(copied.Len()) || n == 0 {
		t.Fatalf("Backup returned %d bytes, wrote %d", n, copied.Len())
	}
	if left := leftovers(t, dir); len(left) != 0 {
		t.Errorf("temporary copies left in the data directory: %v", left)
	}

	restored := t.TempDir()
	if err := os.WriteFile(filepath.Join(restored, FileName), copied.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := open(t, restored)
	defer r.Close()
	after := exportAll(t, r, id)
	for mode, b := range before {
		if after[mode] != b {
			t.Errorf("ExportBranch(%v) of the restored copy differs:\nbefore %s\nafter  %s", mode, b, after[mode])
		}
	}
}

// writerFunc is an io.Writer from a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestBackupOneAtATime: a second backup while one runs is refused with ErrBackupInProgress, and
// the store backs up again once the first has ended.
func TestBackupOneAtATime(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	conversation(t, s)

	writing, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		once := false
		_, err := s.Backup(tctx(t), writerFunc(func(p []byte) (int, error) {
			if !once {
				once = true
				close(writing)
				<-release
			}
			return len(p), nil
		}))
		first <- err
	}()
	select {
	case <-writing:
	case err := <-first:
		t.Fatalf("the first Backup ended before it wrote: %v", err)
	}
	if _, err := s.Backup(tctx(t), &bytes.Buffer{}); !errors.Is(err, store.ErrBackupInProgress) {
		t.Errorf("a second Backup while one runs: %v, want ErrBackupInProgress", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first Backup: %v", err)
	}
	if _, err := s.Backup(tctx(t), &bytes.Buffer{}); err != nil {
		t.Errorf("a Backup after the first ended: %v", err)
	}
}

// TestBackupCleansUp: issue 15's brief, "the temp file is removed when the stream ends, fails or is
// cancelled": a failing writer and a cancelled context leave no copy behind.
func TestBackupCleansUp(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	conversation(t, s)

	errSink := errors.New("disk full")
	if _, err := s.Backup(tctx(t), writerFunc(func([]byte) (int, error) { return 0, errSink })); !errors.Is(err, errSink) {
		t.Errorf("Backup into a failing writer: %v, want %v", err, errSink)
	}
	if left := leftovers(t, dir); len(left) != 0 {
		t.Errorf("after a failed backup, copies left: %v", left)
	}

	ctx, cancel := context.WithCancel(tctx(t))
	if _, err := s.Backup(ctx, writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })); !errors.Is(err, context.Canceled) {
		t.Errorf("Backup whose context ends while it sends: %v, want context.Canceled", err)
	}
	if _, err := s.Backup(ctx, &bytes.Buffer{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Backup with an ended context: %v, want context.Canceled", err)
	}
	if left := leftovers(t, dir); len(left) != 0 {
		t.Errorf("after cancelled backups, copies left: %v", left)
	}
}

// TestOpenStoreRemovesBackupLeftovers: issue 15 review, "a temporary copy can outlive a shutdown ...
// remove leftovers in OpenStore": a copy a crash left in the data directory is gone once the store
// opens, before any backup runs.
func TestOpenStoreRemovesBackupLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	conversation(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(dir, ".historyd-backup-123.tmp")
	if err := os.WriteFile(crashed, []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An operator's own backup in the data directory, named as the docs
	// name backups, is theirs: OpenStore must not take it for a leftover.
	mine := filepath.Join(dir, "historyd-backup-2026-12-03.db")
	if err := os.WriteFile(mine, []byte("an operator's backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	if left := leftovers(t, dir); len(left) != 0 {
		t.Errorf("after OpenStore, a crash's leftover copy is still there: %v", left)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("OpenStore removed an operator's backup: %v", err)
	}
}

// TestCloseEndsRunningBackup: issue 15 review, "make Close cancel a running backup and wait for it
// to remove its temp file": Close during a backup that is sending its copy stops it (the backup
// fails with ErrClosed) and returns only once the temporary copy is gone.
func TestCloseEndsRunningBackup(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	conversation(t, s)

	writing := make(chan struct{})
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	var first int
	go func() {
		n, err := s.Backup(tctx(t), writerFunc(func(p []byte) (int, error) {
			if first == 0 {
				first = len(p)
				close(writing)
				<-s.stop // the first chunk is in flight until Close has begun
			}
			return len(p), nil
		}))
		done <- result{n, err}
	}()
	select {
	case <-writing:
	case r := <-done:
		t.Fatalf("the Backup ended before it wrote: %d bytes, %v", r.n, r.err)
	}
	if left := leftovers(t, dir); len(left) != 1 {
		t.Fatalf("while the backup sends, the temporary copies are %v, want one", left)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, dir); len(left) != 0 {
		t.Errorf("Close returned with the running backup's temporary copy still there: %v", left)
	}
	r := <-done
	if !errors.Is(r.err, ErrClosed) {
		t.Errorf("the Backup Close stopped after %d bytes (the first write %d): %v, want ErrClosed", r.n, first, r.err)
	}
	if _, err := s.Backup(tctx(t), &bytes.Buffer{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Backup after Close: %v, want ErrClosed", err)
	}
}

// liveBytes is the database's live size as the backup's space check reckons it.
func liveBytes(t *testing.T, s *Store) int64 {
	t.Helper()
	var pages, free, size int64
	if err := s.db.read.QueryRowContext(tctx(t), "SELECT p.page_count, f.freelist_count, z.page_size FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() z").Scan(&pages, &free, &size); err != nil {
		t.Fatal(err)
	}
	return (pages - free) * size
}

// TestBackupRefusedWithoutRoom: issue 15 review, "a backup can take down live writes ... before
// copying, check free space ... and refuse with RESOURCE_EXHAUSTED and ERROR_REASON_STORAGE_FULL
// naming the directory and the figures": with one byte less free than the live size plus 64 MiB
// the backup is refused before it writes a temporary copy, with a *StorageError of ErrStorageFull
// naming the file, the directory and the figures, and writes go on; with exactly that much free it
// runs.
func TestBackupRefusedWithoutRoom(t *testing.T) {
	dir := t.TempDir()
	var free int64
	var asked []string
	s, err := OpenStore(context.Background(), StoreConfig{
		Config:    Config{Dir: dir, CacheKiB: 1024, Readers: 2},
		freeSpace: func(d string) (int64, error) { asked = append(asked, d); return free, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id := conversation(t, s)
	live := liveBytes(t, s)
	need := live + backupMarginMin // a small database: the margin is 64 MiB, not a tenth of it

	free = need - 1
	_, err = s.Backup(tctx(t), writerFunc(func([]byte) (int, error) {
		t.Error("a refused backup wrote a copy")
		return 0, errors.New("refused")
	}))
	var se *StorageError
	if !errors.Is(err, store.ErrStorageFull) || !errors.As(err, &se) || se.File != s.Path() {
		t.Fatalf("Backup with %d bytes free of the %d it needs: %v (%T), want a *StorageError of ErrStorageFull naming %s", free, need, err, err, s.Path())
	}
	for _, want := range []string{dir, strconv.FormatInt(need, 10), strconv.FormatInt(live, 10), strconv.FormatInt(backupMarginMin, 10), strconv.FormatInt(free, 10)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %s", err, want)
		}
	}
	if len(asked) != 1 || asked[0] != dir {
		t.Errorf("the free space was asked of %q, want [%s]", asked, dir)
	}
	if left := leftovers(t, dir); len(left) != 0 {
		t.Errorf("a refused backup left copies: %v", left)
	}
	if _, err := s.AddMessage(tctx(t), id, addInput("after the refusal"), store.WriteOptions{}); err != nil {
		t.Errorf("a write after the refused backup: %v", err)
	}

	free = liveBytes(t, s) + backupMarginMin
	if _, err := s.Backup(tctx(t), &bytes.Buffer{}); err != nil {
		t.Errorf("Backup with exactly the room it needs: %v", err)
	}
}

// TestBackupClosed: a closed store refuses to back up.
func TestBackupClosed(t *testing.T) {
	s := open(t, t.TempDir())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backup(tctx(t), &bytes.Buffer{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Backup on a closed store: %v, want ErrClosed", err)
	}
}

// TestBackupFullDisk: issue 15 review, "a VACUUM that itself fails with SQLITE_FULL ... must map
// through the same storage error classes": on a real full filesystem (a 2 MiB tmpfs a filler file
// fills after the space check passed, as another process may), the backup fails with a
// *StorageError of ErrStorageFull naming the database file, leaves no temporary copy, and the
// store stays healthy; with the filler removed the backup runs.
func TestBackupFullDisk(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("skipped: mounting a 2 MiB tmpfs needs root with CAP_SYS_ADMIN (CI runs as root): mount: %v: %s", err, out)
	}
	t.Cleanup(func() { // registered first, so it runs after the store's Close
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	dir := filepath.Join(mnt, "data")
	s, err := OpenStore(context.Background(), StoreConfig{
		Config:    Config{Dir: dir, CacheKiB: 1024, Readers: 2},
		freeSpace: func(string) (int64, error) { return 1 << 40, nil }, // the check passes; the disk fills after it
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	conversation(t, s)

	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	_, err = s.Backup(tctx(t), &bytes.Buffer{})
	var se *StorageError
	if !errors.Is(err, store.ErrStorageFull) || !errors.As(err, &se) || se.File != s.Path() || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("Backup on a full disk: %v (%T), want a *StorageError of ErrStorageFull naming %s", err, err, s.Path())
	}
	if left := leftovers(t, dir); len(left) != 0 {
		t.Errorf("a backup that filled the disk left copies: %v", left)
	}
	if _, err := s.health.get(); err != nil {
		t.Errorf("after the backup's full disk the store is unhealthy: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backup(tctx(t), &bytes.Buffer{}); err != nil {
		t.Errorf("Backup once space is freed: %v", err)
	}
}

// fill writes path until its filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v, want ENOSPC", path, err)
			}
			return
		}
	}
}
