// Package pgtest finds the PostgreSQL that tests run against and gives each test a schema of its
// own, dropped when the test ends (issue 16): tests read HISTORYD_TEST_POSTGRES_URL and, without it,
// try the local server these machines run (LocalURL). Only when neither answers do they skip, with
// one line that says how to run them; with HISTORYD_REQUIRE_POSTGRES=1 (.ci/run sets it) they fail
// instead, so CI never passes by skipping.
//
// Import rule: pgx, the standard library and testing only.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The environment a test run reads, and the local server tried without it.
const (
	EnvURL     = "HISTORYD_TEST_POSTGRES_URL"
	EnvRequire = "HISTORYD_REQUIRE_POSTGRES"
	LocalURL   = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// probeTimeout bounds how long a test binary looks for PostgreSQL, once.
const probeTimeout = 3 * time.Second

var probe struct {
	once sync.Once
	url  string
	err  error
}

// URL returns the PostgreSQL URL tests use. When none answers it skips t (or fails it under
// HISTORYD_REQUIRE_POSTGRES=1), saying how to run the suite.
func URL(t testing.TB) string {
	t.Helper()
	probe.once.Do(func() {
		probe.url = os.Getenv(EnvURL)
		if probe.url == "" {
			probe.url = LocalURL
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, probe.url)
		if err != nil {
			probe.err = err
			return
		}
		probe.err = conn.Ping(ctx)
		conn.Close(ctx)
	})
	if probe.err != nil {
		msg := fmt.Sprintf("no PostgreSQL at %s (%v): the PostgreSQL suites need one; set %s to a server's URL, or start the local one (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)",
			Redact(probe.url), probe.err, EnvURL)
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s; %s=1 requires it", msg, EnvRequire)
		}
		t.Skip(msg)
	}
	return probe.url
}

var schemas atomic.Int64

// Schema creates a schema of its own for t in the database at base and returns its name; it is
// dropped, with everything in it, when t ends.
func Schema(t testing.TB, base string) string {
	t.Helper()
	name := fmt.Sprintf("historyd_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, schemas.Add(1))
	exec(t, base, "CREATE SCHEMA "+name)
	t.Cleanup(func() { exec(t, base, "DROP SCHEMA "+name+" CASCADE") })
	return name
}

// SchemaURL returns base with its search_path set to schema: every connection made from it works
// in that schema (pgx passes unknown URL parameters to the server as run-time parameters).
func SchemaURL(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		t.Fatalf("pgtest: %s is not a postgres:// URL (a key=value DSN cannot be given a schema here)", Redact(base))
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// New is Schema and SchemaURL together: the URL of a fresh schema for t.
func New(t testing.TB) string {
	t.Helper()
	base := URL(t)
	return SchemaURL(t, base, Schema(t, base))
}

// exec runs one statement on a connection of its own.
func exec(t testing.TB, base, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Redact hides a URL's password, for messages.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
