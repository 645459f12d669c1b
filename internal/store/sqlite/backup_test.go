package sqlite

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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
// cancelled": a failing writer and a cancelled context leave no copy behind, and a copy a crash
// left behind is removed by the next backup.
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

	crashed := filepath.Join(dir, "historyd-backup-123.db")
	if err := os.WriteFile(crashed, []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backup(tctx(t), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, dir); len(left) != 0 {
		t.Errorf("a crash's leftover copy was not removed: %v", left)
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
