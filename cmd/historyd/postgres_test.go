package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/migrations"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// TestMigratePostgres: issue 16's `historyd migrate --store postgres --postgres-url URL` applies
// the PostgreSQL dialect's migrations, naming the database (never its password) and each version,
// and says "up to date" when run again; HISTORYD_POSTGRES_URL is its default like the server's.
func TestMigratePostgres(t *testing.T) {
	url := pgtest.New(t)
	supported, err := migrations.Supported(migrations.Postgres)
	if err != nil || supported < 1 {
		t.Fatalf("migrations.Supported = %d, %v", supported, err)
	}
	name := "PostgreSQL " + postgresTarget(url)
	code, out, errOut := runMigrate(t, nil, "--store", "postgres", "--postgres-url", url)
	if code != 0 || errOut != "" {
		t.Fatalf("migrate = %d, stdout %q, stderr %q", code, out, errOut)
	}
	for v := int64(1); v <= supported; v++ {
		if want := fmt.Sprintf("%s: applied migration %d\n", name, v); !strings.Contains(out, want) {
			t.Errorf("migrate printed %q, want it to contain %q", out, want)
		}
	}
	// HISTORYD_DATA_DIR as the image sets it: ignored with postgres, not refused (config_engine.go).
	code, out, errOut = runMigrate(t, map[string]string{"HISTORYD_STORE": "postgres", "HISTORYD_POSTGRES_URL": url, "HISTORYD_DATA_DIR": "/var/lib/historyd"})
	if want := fmt.Sprintf("%s: schema up to date (version %d)\n", name, supported); code != 0 || out != want || errOut != "" {
		t.Errorf("migrate again = %d, %q, %q; want 0 and %q", code, out, errOut, want)
	}
}

// TestMigratePostgresUsage: the flags migrate refuses before touching anything (exit 2).
func TestMigratePostgresUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "postgres"}, "--store postgres needs --postgres-url"},
		{[]string{"--store", "memory"}, "keeps no schema to migrate"},
		{[]string{"--store", "oracle"}, `store "oracle": want sqlite or postgres`},
	} {
		code, _, errOut := runMigrate(t, nil, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("migrate %q = %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestPostgresTargetHidesThePassword: log lines name the server and database, never the URL's
// credentials.
func TestPostgresTargetHidesThePassword(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://bob:s3cret@db.example:6543/hist?sslmode=disable":  "db.example:6543/hist",
		"host=db.example port=5433 user=bob password=s3cret dbname=h": "db.example:5433/h",
	} {
		if got := postgresTarget(in); got != want || strings.Contains(got, "s3cret") {
			t.Errorf("postgresTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPostgresEngineBackupPointsToTheDatabase: AdminService.Backup on the PostgreSQL engine is
// FAILED_PRECONDITION (BACKUP_UNSUPPORTED) with a message that names the database's own tools.
func TestPostgresEngineBackupPointsToTheDatabase(t *testing.T) {
	url := pgtest.New(t)
	c, err := parseConfig(nil, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	c.Store.Engine, c.Store.PostgresURL, c.Store.PostgresMaxConns = storePostgres, url, 2
	e, err := openEngine(context.Background(), c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if e.name != storePostgres || e.target != postgresTarget(url) {
		t.Errorf("engine %q target %q", e.name, e.target)
	}
	_, err = e.backup.Backup(context.Background(), nil)
	if !errors.Is(err, store.ErrBackupUnsupported) || !strings.Contains(err.Error(), "pg_dump") {
		t.Errorf("Backup = %v; want ErrBackupUnsupported naming pg_dump", err)
	}
}
