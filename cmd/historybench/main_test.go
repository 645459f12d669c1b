package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The whole tool runs end to end with -quick (every scenario, tiny): it builds historyd, starts it,
// measures, prints the table and writes the results file with the machine's core count and the
// date (issue 8). The figures of so short a run mean nothing; the rows and the file's shape do.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs historyd")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root) // the tool builds ./cmd/historyd from the module root, as make bench runs it
	out := filepath.Join(t.TempDir(), "results.md")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"-quick", "-profile=false", "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("historybench -quick exited %d:\n%s", code, stderr.String())
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"AddMessage / Health.Check throughput, concurrency 1",
		"AddMessage / Health.Check throughput, concurrency 50",
		"ListMessages page of 100 latency",
		"AddMessage throughput with 5 watchers asking for batches / with none",
		// issue 21's rows.
		"AppendMessages (one stream, window 64) / unary AddMessage c=50, memory",
		"AppendMessages (window 64) / Redis XADD c=50, memory",
		"AppendMessages (window 64), sqlite --sync=full / Redis XADD c=50, appendfsync always",
		"Exchange Send+Collect, direct",
		"Exchange Send+Collect, broadcast",
		"resident memory per stored 1 KB message",
		// issue 14's rows; the PostgreSQL one has a figure or says it was skipped, never neither.
		"AddMessage throughput, sqlite --sync=normal / memory engine, concurrency 50",
		"ListMessages page of 100 latency (p50), 2k-message branch / 200-message branch, sqlite engine",
		"AddMessage throughput, sqlite --sync=full / PostgreSQL INSERT (synchronous_commit on), concurrency 50",
		memoryOverInsertName,
		"sqlite resident memory growth storing 2k 1 KB messages",
		"sqlite disk bytes per stored 1 KB message",
		"sqlite start to SERVING, 2k-message database / empty database",
		// issue 17's: the Exchange on sqlite and on PostgreSQL (which may say skipped) over memory.
		exchangeEnginesRowName(5, sqliteExchangeEngine),
		exchangeEnginesRowName(5, pgExchangeEngine),
		// issue 16's rows: figures with a historyd that serves PostgreSQL, else each says skipped.
		pgInsertRowName,
		"AddMessage latency (p99), 50 appenders on one branch of 2k messages / on a fresh branch, PostgreSQL engine",
		pgWatchLatencyName + " p50",
		pgWatchLatencyName + " p99",
		"AddMessage throughput on replica A with 5 watchers on replica B / with none, PostgreSQL engine",
		// issue 18's: Lease+Ack over Send+PopMessage on each engine (PostgreSQL's may say skipped).
		leaseRowName(leaseMemoryEngine, 2),
		leaseRowName(leaseSQLiteEngine, 2),
		leaseRowName(leasePGEngine, 2),
		"cores (GOMAXPROCS",
		"- date: ",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results file lacks %q:\n%s", want, md)
		}
		if !strings.HasPrefix(want, "-") && !strings.Contains(want, "cores") && !strings.Contains(stdout.String(), want) {
			t.Errorf("printed table lacks %q:\n%s", want, stdout.String())
		}
	}
}

// Without a PostgreSQL at -postgres-url, the sqlite --sync=full row says so and carries no figure
// (issue 14's brief: never a made-up one); the table and the results file print the reason in the
// figure's place and "skipped" in the met column.
func TestPostgresRowSkippedWithoutServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"
	b := &bench{cfg: config{PostgresURL: url}, log: io.Discard}
	rows, err := benchSQLiteVsPostgres(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || len(rows[0].Runs) != 0 || rows[0].Met() != "skipped" || len(rows[1].Runs) != 0 || rows[1].Met() != "skipped" {
		t.Fatalf("rows = %+v, want the row and its reported ceiling, both skipped, without runs", rows)
	}
	var table, md bytes.Buffer
	printTable(&table, rows)
	markdown(&md, machine{}, config{}, rows)
	for name, out := range map[string]string{"table": table.String(), "results": md.String()} {
		if !strings.Contains(out, "skipped: no PostgreSQL at "+url) || strings.Contains(out, "0.00") {
			t.Errorf("%s lacks the skip, or shows a figure:\n%s", name, out)
		}
	}
}
