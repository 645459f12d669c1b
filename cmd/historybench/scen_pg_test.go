package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startMemoryServer builds historyd and starts it on the memory engine, stopped when t ends.
func startMemoryServer(t *testing.T, ctx context.Context) *pgServer {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	bin, err := buildHistoryd(ctx, "go", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := startHistoryd(ctx, bin, "--store", "memory")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Error(err)
		}
	})
	return &pgServer{historyd: h}
}

// The PostgreSQL watch and convoy loads, run against one memory-engine server standing for both
// replicas (the engine itself is not needed to check the harness): the delivery latencies are
// samples of real deliveries, every watcher gets every event, and an append that lands below the
// branch's known length fails the run (issue 16's convoy: "every acknowledged message at its own
// index").
func TestPGLoadsOnOneServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs historyd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startMemoryServer(t, ctx)
	b := &bench{cfg: config{Runs: 2, Duration: 200 * time.Millisecond, Watchers: 5, PostgresReplicaConns: 25}, log: io.Discard}

	rows, err := deliveryLatency(ctx, b, s, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || len(rows[0].Runs) != 2 || rows[0].Unit != "ms" || rows[0].Summary().Median <= 0 ||
		rows[0].Summary().Median > rows[1].Summary().Median {
		t.Fatalf("latency rows = %+v, want p50 and p99 of 2 runs, 0 < p50 <= p99", rows)
	}
	r, err := watchersOnOtherReplica(ctx, b, s, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 2 || r.Summary().Min <= 0 || !strings.Contains(r.Detail, "every event delivered") {
		t.Fatalf("watchers row = %+v, want 2 positive ratios", r)
	}

	ids, err := createBranches(ctx, s.historyd, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Client.History.AddMessage(ctx, addRequest(ids[0], i)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := appendLatencies(ctx, s.historyd, ids[0], 3, 100*time.Millisecond)
	if err != nil || l.p50 <= 0 || l.p99 < l.p50 || l.perSecond <= 0 {
		t.Fatalf("appendLatencies = %+v, %v", l, err)
	}
	if _, err := appendLatencies(ctx, s.historyd, ids[0], 1_000_000, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "index") {
		t.Fatalf("appendLatencies below the known length: %v, want an error naming the index", err)
	}
}
