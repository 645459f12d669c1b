package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Each historyd on PostgreSQL gets its schema through the connection string's search_path (the
// brief of issue 16's bench), in a URL or in a key=value DSN, the other parameters kept.
func TestWithSearchPath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?search_path=s1&sslmode=disable"},
		{"postgres://u:p@h/db", "postgres://u:p@h/db?search_path=s1"},
		{"postgres://h/db?search_path=old", "postgres://h/db?search_path=s1"},
		{"host=h dbname=test ", "host=h dbname=test search_path=s1"},
	} {
		got, err := withSearchPath(c.in, "s1")
		if err != nil || got != c.want {
			t.Errorf("withSearchPath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// fakeHistoryd writes an executable whose `help` prints help.
func fakeHistoryd(t *testing.T, help string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "historyd")
	script := "#!/bin/sh\ncat <<'EOF'\n" + help + "\nEOF\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// checkSkipped checks that rows are the PostgreSQL engine's six rows (issue 16's five, issue 17's
// Exchange row), each skipped with reason and no figure,
// in the table and in the results file.
func checkSkipped(t *testing.T, rows []row, reason string) {
	t.Helper()
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if len(r.Runs) != 0 || r.Met() != "skipped" || r.Skipped != "skipped: "+reason {
			t.Errorf("row %q: runs %v, met %q, skipped %q; want skipped: %s", r.Name, r.Runs, r.Met(), r.Skipped, reason)
		}
	}
	var table, md bytes.Buffer
	printTable(&table, rows)
	markdown(&md, machine{}, config{}, rows)
	for name, out := range map[string]string{"table": table.String(), "results": md.String()} {
		if strings.Count(out, "skipped: "+reason) != 6 || strings.Contains(out, "0.00") {
			t.Errorf("%s lacks the skips, or shows a figure:\n%s", name, out)
		}
	}
}

// Until historyd has --store postgres (its help lists no --postgres-url), issue 16's rows say so,
// with no figure and without connecting anywhere (the brief: "compile and skip cleanly").
func TestPostgresEngineRowsSkippedWithoutEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := fakeHistoryd(t, "  --store\n        sqlite or memory")
	if err := probePostgresEngine(ctx, bin); !errors.Is(err, errNoPostgresEngine) {
		t.Fatalf("probe of a historyd without the engine: %v, want errNoPostgresEngine", err)
	}
	b := &bench{cfg: config{PostgresURL: "postgres://postgres@127.0.0.1:1/none?sslmode=disable", ConvoyMessages: 100_000, Watchers: 100}, bin: bin, log: io.Discard}
	rows, err := benchPostgresEngine(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	checkSkipped(t, rows, "historyd cannot serve PostgreSQL")
}

// With the engine but no PostgreSQL at -postgres-url, the rows say that instead.
func TestPostgresEngineRowsSkippedWithoutServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := fakeHistoryd(t, "  --postgres-url\n        the PostgreSQL")
	if err := probePostgresEngine(ctx, bin); err != nil {
		t.Fatalf("probe of a historyd with the engine: %v", err)
	}
	url := "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"
	b := &bench{cfg: config{PostgresURL: url, ConvoyMessages: 100_000, Watchers: 100}, bin: bin, log: io.Discard}
	rows, err := benchPostgresEngine(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	checkSkipped(t, rows, "no PostgreSQL at "+url)
}
