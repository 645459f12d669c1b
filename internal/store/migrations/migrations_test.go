package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/historyd/historyd/internal/store/migrations"
)

func open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// issue 14: "historyd migrate applies them"; a second run applies nothing.
func TestUpAppliesOnce(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	if err := migrations.Check(ctx, migrations.SQLite, db); !errors.Is(err, migrations.ErrPending) {
		t.Fatalf("Check on an empty database = %v, want ErrPending", err)
	}
	applied, err := migrations.Up(ctx, migrations.SQLite, db)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := migrations.Supported(migrations.SQLite)
	if len(applied) == 0 || applied[len(applied)-1] != want {
		t.Fatalf("applied %v, want up to %d", applied, want)
	}
	if again, err := migrations.Up(ctx, migrations.SQLite, db); err != nil || len(again) != 0 {
		t.Fatalf("second Up = %v, %v; want nothing applied", again, err)
	}
	if err := migrations.Check(ctx, migrations.SQLite, db); err != nil {
		t.Fatalf("Check after Up = %v", err)
	}
	// The collections rank of issue 13 is a column of the schema.
	if _, err := db.ExecContext(ctx, "SELECT rank FROM messages LIMIT 0"); err != nil {
		t.Fatalf("messages.rank: %v", err)
	}
}

// issue 14: "a database whose schema is newer than the server supports is
// refused with an error naming both versions".
func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	if _, err := migrations.Up(ctx, migrations.SQLite, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, 1)"); err != nil {
		t.Fatal(err)
	}
	supported, _ := migrations.Supported(migrations.SQLite)
	for name, run := range map[string]func() error{
		"Up":    func() error { _, err := migrations.Up(ctx, migrations.SQLite, db); return err },
		"Check": func() error { return migrations.Check(ctx, migrations.SQLite, db) },
	} {
		err := run()
		var ve *migrations.VersionError
		if !errors.As(err, &ve) || !errors.Is(err, migrations.ErrSchemaTooNew) || ve.Database != 99 || ve.Supported != supported {
			t.Fatalf("%s on a newer schema = %v, want a VersionError{99, %d}", name, err, supported)
		}
		if msg := err.Error(); !strings.Contains(msg, "99") || !strings.Contains(msg, fmt.Sprintf("(%d)", supported)) {
			t.Fatalf("%s: %q does not name both versions", name, msg)
		}
	}
}

// docs/design.md#storage: one schema, two dialects: both directories
// carry the same versions, and the primary keys start with tenant.
func TestDialectsInStep(t *testing.T) {
	var names [2][]string
	var texts [2]string
	for i, d := range []string{"sqlite", "postgres"} {
		fsys := migrations.Files()
		ms, err := fs.Glob(fsys, d+"/*.sql")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			names[i] = append(names[i], filepath.Base(m))
			b, _ := fs.ReadFile(fsys, m)
			texts[i] += string(b)
		}
	}
	if !slices.Equal(names[0], names[1]) || len(names[0]) == 0 {
		t.Fatalf("sqlite %v, postgres %v: want the same versions", names[0], names[1])
	}
	for i, text := range texts {
		for _, line := range strings.Split(text, "\n") {
			if strings.Contains(line, "PRIMARY KEY (") && !strings.Contains(line, "PRIMARY KEY (tenant,") {
				t.Errorf("dialect %d: %q: primary keys start with tenant (issue 14)", i, strings.TrimSpace(line))
			}
		}
		if strings.Contains(strings.ToLower(text), "jsonb") && !strings.Contains(text, "never jsonb") {
			t.Errorf("dialect %d uses jsonb: messages must come back byte for byte", i)
		}
	}
	s, _ := migrations.Supported(migrations.SQLite)
	p, _ := migrations.Supported(migrations.Postgres)
	if s != p || s < 1 {
		t.Fatalf("Supported: sqlite %d, postgres %d", s, p)
	}
}

// SessionLock is PostgreSQL's advisory lock (issue 16: replicas starting
// together migrate once; internal/store/postgres tests it against a
// server): asked of SQLite, Up refuses and applies nothing.
func TestSessionLockPostgresOnly(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	if applied, err := migrations.Up(ctx, migrations.SQLite, db, migrations.SessionLock(1)); err == nil || len(applied) != 0 {
		t.Fatalf("Up with a session lock on SQLite = %v, %v; want an error and nothing applied", applied, err)
	}
	if err := migrations.Check(ctx, migrations.SQLite, db); !errors.Is(err, migrations.ErrPending) {
		t.Fatalf("Check after the refused Up = %v, want ErrPending", err)
	}
}
