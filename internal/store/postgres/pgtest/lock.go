package pgtest

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store/migrations"
)

// HoldMigrationLock makes a schema of its own under URL(t) and, in a session of its own named app
// (as another process's would be), takes that schema's migration lock (migrations.LockID). It
// returns the schema's URL, the session's backend pid and release, which unlocks it; the
// connection closes when the test ends.
func HoldMigrationLock(ctx context.Context, t *testing.T, app string) (schemaURL string, pid int, release func()) {
	t.Helper()
	base := URL(t)
	schema := Schema(t, base)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var database string
	if err := conn.QueryRow(ctx, "SELECT current_database(), pg_backend_pid()").Scan(&database, &pid); err != nil {
		t.Fatal(err)
	}
	id := migrations.LockID(database, schema)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
		t.Fatal(err)
	}
	return SchemaURL(t, base, schema), pid, func() {
		t.Helper()
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", id); err != nil {
			t.Fatal(err)
		}
	}
}
