package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/store/sqlite"
)

// TestEngineSettingForAnotherEngine: a setting given for an engine other than --store's is a
// usage error, one line, exit 2, for serve and migrate alike. The reviewer's case: `historyd
// --postgres-url URL` served ./data with the URL silently ignored, and `historyd migrate
// --postgres-url URL` migrated ./data/historyd.db and exited 0.
func TestEngineSettingForAnotherEngine(t *testing.T) {
	const url = "postgres://historyd:s3cret@db.example:5432/historyd"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--postgres-url", url}, want: "--postgres-url is set but --store is sqlite; add --store postgres"},
		{env: map[string]string{"HISTORYD_POSTGRES_URL": url}, want: "HISTORYD_POSTGRES_URL is set but --store is sqlite; add --store postgres"},
		{args: []string{"--postgres-max-conns", "5"}, want: "--postgres-max-conns is set but --store is sqlite"},
		{args: []string{"--store", "memory", "--postgres-statement-timeout", "5s"}, want: "--postgres-statement-timeout is set but --store is memory; drop --postgres-statement-timeout, or use --store postgres"},
		{args: []string{"--store", "postgres", "--postgres-url", url, "--data-dir", "/srv/h"}, want: "--data-dir is set but --store is postgres"},
		{args: []string{"--store", "memory", "--sync", "full"}, want: "--sync is set but --store is memory"},
		{args: []string{"--store", "memory", "--auto-migrate=false"}, want: "use --store sqlite or --store postgres"},
		{args: []string{"--memory-budget", "64MiB"}, want: "--memory-budget is set but --store is sqlite; add --store memory"},
		{env: map[string]string{"HISTORYD_STORE": "postgres", "HISTORYD_POSTGRES_URL": url, "HISTORYD_EXCHANGE_MAX_BYTES": "1048576"},
			want: "HISTORYD_EXCHANGE_MAX_BYTES is set but --store is postgres"},
	} {
		// Were the setting accepted, the server would start: on a free port, in a directory of
		// the test's, and stopping at once (a context already ended), so that the test fails
		// rather than serving ./data on 50051.
		env := map[string]string{"HISTORYD_DATA_DIR": t.TempDir(), "HISTORYD_LISTEN": "127.0.0.1:0"}
		for k, v := range tc.env {
			env[k] = v
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var stdout, stderr strings.Builder
		code := runIO(ctx, signals{}, tc.args, envOf(env), &stdout, &stderr)
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || strings.Contains(lines[0], "s3cret") {
			t.Errorf("historyd %q (env %v) = %d, %q; want 2 and one line containing %q", tc.args, tc.env, code, stderr.String(), tc.want)
		}
	}

	// Accepted: each engine's own settings, and the sqlite engine's in the environment under
	// another engine (the image's HISTORYD_DATA_DIR under a replica's HISTORYD_STORE=postgres).
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"--store", "postgres", "--postgres-url", url, "--postgres-max-conns", "3", "--auto-migrate=false"}},
		{env: map[string]string{"HISTORYD_STORE": "postgres", "HISTORYD_POSTGRES_URL": url, "HISTORYD_DATA_DIR": "/var/lib/historyd", "HISTORYD_SYNC": "full"}},
		{args: []string{"--store", "memory", "--memory-budget", "64MiB", "--exchange-max-bytes", "0"}, env: map[string]string{"HISTORYD_DATA_DIR": "/var/lib/historyd"}},
		{args: []string{"--data-dir", "/srv/h", "--sync", "full", "--sqlite-readers", "2", "--max-db-bytes", "1GiB"}},
		// The command line wins: the environment's memory engine is not the one in use.
		{args: []string{"--store", "sqlite", "--data-dir", "d"}, env: map[string]string{"HISTORYD_STORE": "memory"}},
	} {
		if _, err := parseConfig(tc.args, envOf(tc.env)); err != nil {
			t.Errorf("parseConfig(%q, %v) = %v, want it accepted", tc.args, tc.env, err)
		}
	}
}

// TestMigrateEngineSettingForAnotherEngine: migrate refuses --postgres-url without --store
// postgres (it migrated the sqlite database in HISTORYD_DATA_DIR instead, and exited 0), and
// --data-dir with --store postgres; it touches no database.
func TestMigrateEngineSettingForAnotherEngine(t *testing.T) {
	const url = "postgres://historyd@127.0.0.1:1/historyd"
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--postgres-url", url}, want: "--postgres-url is set but --store is sqlite; add --store postgres"},
		{args: []string{"--data-dir", dir, "--postgres-url", url}, want: "--postgres-url is set but --store is sqlite"},
		{env: map[string]string{"HISTORYD_POSTGRES_URL": url}, want: "HISTORYD_POSTGRES_URL is set but --store is sqlite"},
		{args: []string{"--store", "postgres", "--postgres-url", url, "--data-dir", dir}, want: "--data-dir is set but --store is postgres"},
	} {
		env := map[string]string{"HISTORYD_DATA_DIR": dir} // never ./data of the package, even when the check is missing
		for k, v := range tc.env {
			env[k] = v
		}
		code, out, errOut := runMigrate(t, env, tc.args...)
		lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
			t.Errorf("migrate %q (env %v) = %d, stdout %q, stderr %q; want 2 and one line containing %q", tc.args, tc.env, code, out, errOut, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, sqlite.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused migrate touched %s: stat = %v", dir, err)
	}
}
