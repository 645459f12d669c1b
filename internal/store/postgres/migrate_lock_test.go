package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store/migrations"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// The migrations' advisory lock is the schema's (issue 16: "replicas that start together migrate
// safely"): while a session holds schema A's, a Migrate of A waits, and one of schema B does not.
// With goose's one database-wide key every historyd schema and test waited for every other.
func TestMigrateLockIsPerSchema(t *testing.T) {
	base := pgtest.URL(t)
	a, b := pgtest.Schema(t, base), pgtest.Schema(t, base)
	ctx := tctx(t)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var database string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrations.LockID(database, a)); err != nil {
		t.Fatal(err)
	}
	if applied, err := Migrate(ctx, pgtest.SchemaURL(t, base, b)); err != nil || len(applied) == 0 {
		t.Fatalf("Migrate of schema B while A's lock is held = %v, %v; want it applied", applied, err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if applied, err := Migrate(short, pgtest.SchemaURL(t, base, a)); !errors.Is(err, context.DeadlineExceeded) || len(applied) != 0 {
		t.Fatalf("Migrate of schema A while its lock is held = %v, %v; want it to wait (deadline exceeded)", applied, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrations.LockID(database, a)); err != nil {
		t.Fatal(err)
	}
	if applied, err := Migrate(ctx, pgtest.SchemaURL(t, base, a)); err != nil || len(applied) == 0 {
		t.Fatalf("Migrate of schema A once its lock is free = %v, %v; want it applied", applied, err)
	}
}
