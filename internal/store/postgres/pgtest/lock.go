package pgtest

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// HoldAdvisoryLock connects to base as application app, a session of its own, as another process
// would be, and takes the advisory lock that lockID names for the session's database (the caller
// passes migrations.LockID with its schema). It returns the session's backend pid and release,
// which unlocks it; the connection closes when the test ends.
func HoldAdvisoryLock(ctx context.Context, t *testing.T, base, app string, lockID func(database string) int64) (pid int, release func()) {
	t.Helper()
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
	id := lockID(database)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
		t.Fatal(err)
	}
	return pid, func() {
		t.Helper()
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", id); err != nil {
			t.Fatal(err)
		}
	}
}
