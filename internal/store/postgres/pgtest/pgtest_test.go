package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A test's schema is its connections' search_path, and it is gone once the test ends (issue 16:
// "Each test run works in its own schema or database, dropped afterwards").
func TestSchemaIsolatedAndDropped(t *testing.T) {
	base := URL(t)
	var name string
	t.Run("inner", func(t *testing.T) {
		name = Schema(t, base)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, SchemaURL(t, base, name))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
			t.Fatal(err)
		}
		var schema string
		if err := conn.QueryRow(ctx, "SELECT table_schema FROM information_schema.tables WHERE table_name = 't' AND table_schema = current_schema()").Scan(&schema); err != nil {
			t.Fatal(err)
		}
		if schema != name {
			t.Fatalf("table made in %q, want %q", schema, name)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("schema %s still exists after its test", name)
	}
}

func TestRedact(t *testing.T) {
	if got := Redact("postgres://u:secret@h:5432/db?sslmode=disable"); got != "postgres://u:xxxxx@h:5432/db?sslmode=disable" {
		t.Fatal(got)
	}
}
