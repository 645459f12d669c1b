package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store/sqlite"
)

// TestStoreConfig: issue 14's engine settings: sqlite in ./data by default with --sync=normal and
// --auto-migrate, HISTORYD_* fallbacks, flags that win over the environment, and the cache flags
// mapped onto sqlite.Config.
func TestStoreConfig(t *testing.T) {
	def := storeConfig{Engine: storeSQLite, DataDir: "./data", Sync: "normal", AutoMigrate: true,
		SQLiteCache: 32 << 20, SQLiteReaders: 4, PostgresMaxConns: 10}
	with := func(f func(*storeConfig)) storeConfig {
		c := def
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want storeConfig
	}{
		{"defaults", nil, nil, def},
		{"environment", nil, map[string]string{"HISTORYD_STORE": "memory", "HISTORYD_DATA_DIR": "/var/lib/historyd",
			"HISTORYD_SYNC": "full", "HISTORYD_AUTO_MIGRATE": "false", "HISTORYD_SQLITE_CACHE": "8MiB", "HISTORYD_SQLITE_READERS": "2"},
			with(func(c *storeConfig) {
				c.Engine, c.DataDir, c.Sync, c.AutoMigrate, c.SQLiteCache, c.SQLiteReaders = storeMemory, "/var/lib/historyd", "full", false, 8<<20, 2
			})},
		{"flags win", []string{"--store", "sqlite", "--data-dir", "d", "--sync", "normal", "--auto-migrate=true"},
			map[string]string{"HISTORYD_STORE": "memory", "HISTORYD_DATA_DIR": "e", "HISTORYD_SYNC": "full", "HISTORYD_AUTO_MIGRATE": "false"},
			with(func(c *storeConfig) { c.DataDir = "d" })},
		{"postgres (issue 16)", []string{"--store", "postgres", "--postgres-max-conns", "25"},
			map[string]string{"HISTORYD_POSTGRES_URL": "postgres://h/db", "HISTORYD_POSTGRES_STATEMENT_TIMEOUT": "30s", "HISTORYD_POSTGRES_MAX_CONNS": "3"},
			with(func(c *storeConfig) {
				c.Engine, c.PostgresURL, c.PostgresMaxConns, c.PostgresStatementTimeout = storePostgres, "postgres://h/db", 25, 30*time.Second
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(tc.args, envOf(tc.env))
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if cfg.Store != tc.want {
				t.Errorf("store config = %+v, want %+v", cfg.Store, tc.want)
			}
		})
	}
	cfg, err := parseConfig([]string{"--data-dir", "x", "--sync", "full", "--auto-migrate=false", "--sqlite-cache", "16MiB", "--sqlite-readers", "2"},
		envOf(map[string]string{"HISTORYD_MAX_DB_BYTES": "2GiB"}))
	if err != nil {
		t.Fatal(err)
	}
	want := sqlite.Config{Dir: "x", Sync: sqlite.SyncFull, NoAutoMigrate: true, CacheKiB: 16 << 10, Readers: 2, MaxBytes: 2 << 30}
	if got := cfg.Store.sqliteConfig(); got != want {
		t.Errorf("sqliteConfig = %+v, want %+v", got, want)
	}
	if got := cfg.Store.sqliteCacheBytes(); got != 3*(16<<20) {
		t.Errorf("sqliteCacheBytes = %d, want 3 x 16MiB", got)
	}
}

// TestStoreConfigInvalid: an unknown engine or sync mode, an empty data dir, a cache below 1MiB or
// a reader count out of range is a usage error: one line naming the flag, exit 2.
func TestStoreConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		mention string
	}{
		{args: []string{"--store", "postgres"}, mention: "--postgres-url"},
		{args: []string{"--store", "oracle"}, mention: "sqlite, postgres or memory"},
		{env: map[string]string{"HISTORYD_STORE": "disk"}, mention: "sqlite, postgres or memory"},
		{args: []string{"--postgres-max-conns", "0"}, mention: "1 to 1000"},
		{args: []string{"--postgres-statement-timeout", "-1s"}, mention: "0s (none) or more"},
		{args: []string{"--postgres-statement-timeout", "soon"}, mention: "--postgres-statement-timeout"},
		{env: map[string]string{"HISTORYD_SQLITE_READERS": "many"}, mention: "HISTORYD_SQLITE_READERS"},
		{args: []string{"--sync", "always"}, mention: "normal or full"},
		{args: []string{"--data-dir", ""}, mention: "want a directory"},
		{args: []string{"--sqlite-cache", "64KiB"}, mention: "1MiB"},
		{args: []string{"--sqlite-cache", "lots"}, mention: "--sqlite-cache"},
		{args: []string{"--sqlite-readers", "0"}, mention: "1 to 64"},
		{args: []string{"--sqlite-readers", "65"}, mention: "1 to 64"},
		{args: []string{"--auto-migrate=maybe"}, mention: "true or false"},
		{args: []string{"--max-db-bytes", "512KiB"}, mention: "at least 1MiB"},
		{args: []string{"--max-db-bytes", "big"}, mention: "--max-db-bytes"},
	} {
		var stdout, stderr strings.Builder
		code := runIO(context.Background(), signals{}, tc.args, envOf(tc.env), &stdout, &stderr)
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.mention) {
			t.Errorf("historyd %q (env %v) = %d, %q; want 2 and one line mentioning %q", tc.args, tc.env, code, stderr.String(), tc.mention)
		}
		_, err := parseConfig(tc.args, envOf(tc.env))
		namesTheSetting(t, err, tc.args, tc.env)
		if !errors.Is(err, errUsage) {
			t.Errorf("parseConfig(%q) = %v, want a usage error", tc.args, err)
		}
	}
}
