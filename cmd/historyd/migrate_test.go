package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/historyd/historyd/internal/store/migrations"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// runMigrate runs `historyd migrate args...` with env and returns its exit code and output.
func runMigrate(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := runIO(context.Background(), signals{}, append([]string{"migrate"}, args...), envOf(env), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestMigrateSubcommand: issue 14's `historyd migrate` applies the pending migrations of a fresh
// data directory, naming the versions, and says "up to date" when run again; HISTORYD_DATA_DIR is
// its default like the server's.
func TestMigrateSubcommand(t *testing.T) {
	supported, err := migrations.Supported(migrations.SQLite)
	if err != nil || supported < 1 {
		t.Fatalf("migrations.Supported = %d, %v", supported, err)
	}
	dir := filepath.Join(t.TempDir(), "data") // missing: migrate creates it
	file := filepath.Join(dir, sqlite.FileName)
	code, out, errOut := runMigrate(t, nil, "--data-dir", dir)
	if code != 0 || errOut != "" {
		t.Fatalf("migrate on a fresh dir = %d, stderr %q", code, errOut)
	}
	for v := int64(1); v <= supported; v++ {
		if want := fmt.Sprintf("%s: applied migration %d\n", file, v); !strings.Contains(out, want) {
			t.Errorf("migrate printed %q, want it to contain %q", out, want)
		}
	}
	code, out, errOut = runMigrate(t, map[string]string{"HISTORYD_DATA_DIR": dir})
	if want := fmt.Sprintf("%s: schema up to date (version %d)\n", file, supported); code != 0 || out != want || errOut != "" {
		t.Errorf("migrate again = %d, %q, %q; want 0 and %q", code, out, errOut, want)
	}
}

// TestMigrateRefusedWhileHeld: migrate takes the data directory's lock, so it is refused (exit 1,
// one line naming the directory) while another process holds it, as a serving historyd does.
func TestMigrateRefusedWhileHeld(t *testing.T) {
	dir := t.TempDir()
	// The lock a server holds: an exclusive flock on the directory's lock file (sqlite/lock.go).
	f, err := os.OpenFile(filepath.Join(dir, "historyd.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runMigrate(t, nil, "--data-dir", dir)
	lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
	if code != 1 || out != "" || len(lines) != 1 || !strings.Contains(lines[0], dir) || !strings.Contains(lines[0], "in use") {
		t.Errorf("migrate on a held dir = %d, stdout %q, stderr %q; want 1 and one line naming %s", code, out, errOut, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, sqlite.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("migrate on a held dir touched the database: stat = %v", err)
	}
}

// TestMigrateUsage: --help prints the usage on stdout; a stray argument or an unknown flag is
// exit 2 with one line.
func TestMigrateUsage(t *testing.T) {
	if code, out, _ := runMigrate(t, nil, "--help"); code != 0 || !strings.Contains(out, "usage: historyd migrate") {
		t.Errorf("migrate --help = %d, %q", code, out)
	}
	for _, args := range [][]string{{"extra"}, {"--store", "memory"}, {"--data-dir", ""}} {
		code, _, errOut := runMigrate(t, nil, args...)
		if lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n"); code != 2 || len(lines) != 1 {
			t.Errorf("migrate %q = %d, %q; want 2 and one line", args, code, errOut)
		}
	}
}

// TestStoreErrorNamesTheDirectory: the start refusals of issues 14 and 15 are one line naming the
// data directory: a lock another historyd holds, a schema newer than this server (both versions),
// pending migrations with --auto-migrate=false (both versions and the command to run), a directory
// that cannot be created, and a file that is not historyd's database (naming the file).
func TestStoreErrorNamesTheDirectory(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{&sqlite.LockError{Dir: "/srv/d"}, []string{"/srv/d", "in use by another historyd"}},
		{fmt.Errorf("open: %w", &migrations.VersionError{Database: 3, Supported: 2}), []string{"/srv/d", "version 3", "(2)"}},
		{&migrations.PendingError{Database: 1, Supported: 2}, []string{"/srv/d", "version 1", "(2)", "historyd migrate --data-dir /srv/d"}},
		{errors.New("disk full"), []string{"/srv/d", "disk full"}},
		// Issue 15: a directory that cannot be created, a file that is not historyd's database.
		{&sqlite.DirError{Dir: "/srv/d", Err: errors.New("mkdir /srv/d: not a directory")}, []string{"/srv/d", "cannot be created", "not a directory"}},
		{&sqlite.FileError{File: "/srv/d/historyd.db", Problem: "is not an SQLite database"}, []string{"/srv/d/historyd.db", "is not an SQLite database", "move it away"}},
	} {
		msg := storeError("/srv/d", tc.err).Error()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) || strings.Contains(msg, "\n") {
				t.Errorf("storeError(%v) = %q, want one line containing %q", tc.err, msg, w)
			}
		}
	}
}
