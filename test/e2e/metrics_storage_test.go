//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestMetricsStorageSQLite: issue 15 acceptance, "`curl -s METRICS/metrics | grep historyd_store_`
// shows the storage series on a running server": historyd on the sqlite engine, after writes and
// reads, has each storage series with a value its writes explain (the memory engine's
// historyd_store_memory_* are there too, and are not what this checks).
func TestMetricsStorageSQLite(t *testing.T) {
	p := startSQLite(t, t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	metricsAddr := logAddress(t, p, "serving metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	c := historyv1.NewHistoryServiceClient(dial(t, p))
	b, err := c.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatalf("CreateBranch: %v", err)
	}
	// ~1.6 MB of instructions, about 8 WAL pages a write one at a time (indexes, event, branch row):
	// more than the ~4000 WAL pages after which the writer checkpoints.
	const writes = 1600
	text := strings.Repeat("All work and no play makes Jack a dull boy. ", 23)
	for i := range writes {
		if _, err := c.AddMessage(ctx, instruction(b.GetBranch().GetId(), text, "")); err != nil {
			t.Fatalf("AddMessage %d: %v", i, err)
		}
	}
	if _, err := c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b.GetBranch().GetId()}); err != nil {
		t.Fatalf("ListMessages: %v", err)
	}

	m := scrape(t, metricsAddr)
	// As the issue says, when the machine has curl: the new series are among the lines grep shows.
	if curl, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command(curl, "-s", "http://"+metricsAddr+"/metrics").Output()
		if err != nil {
			t.Fatalf("curl -s %s/metrics: %v", metricsAddr, err)
		}
		var grep []string // | grep historyd_store_
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, "historyd_store_") {
				grep = append(grep, strings.TrimSpace(line))
			}
		}
		shown := strings.Join(grep, "\n")
		for _, name := range []string{"historyd_store_write_transaction_seconds_bucket", "historyd_store_commit_writes_bucket",
			"historyd_store_checkpoint_seconds_bucket", "historyd_store_checkpoints_incomplete_total",
			"historyd_store_checkpoint_errors_total", "historyd_store_database_bytes", "historyd_store_wal_bytes",
			"historyd_store_cache_hits_total", "historyd_store_cache_misses_total"} {
			if !strings.Contains(shown, name) {
				t.Errorf("curl -s /metrics | grep historyd_store_ shows no %s", name)
			}
		}
		t.Logf("curl -s /metrics | grep historyd_store_ | grep -v _bucket:\n%s", strings.Join(slices.DeleteFunc(grep, func(l string) bool {
			return strings.Contains(l, "_bucket")
		}), "\n"))
	} else {
		t.Log("no curl on PATH: the series read with net/http only")
	}

	// One transaction per batch: at least one per 256 writes, at most one per write (and the
	// CreateBranch); the writes they carried add up to every write.
	txs, _ := m.get("historyd_store_write_transaction_seconds_count")
	if txs < writes/256 || txs > writes+1 {
		t.Errorf("write transactions %v for %d sequential writes", txs, writes+1)
	}
	if sum, _ := m.get("historyd_store_write_transaction_seconds_sum"); sum <= 0 || sum > 60 {
		t.Errorf("write transaction seconds sum %v", sum)
	}
	if n, _ := m.get("historyd_store_commit_writes_sum"); n < writes+1 {
		t.Errorf("writes committed %v, want >= %d", n, writes+1)
	}
	if n, _ := m.get("historyd_store_commit_writes_count"); n != txs {
		t.Errorf("commit writes observed %v times, write transactions %v: want one each per commit", n, txs)
	}
	if n, ok := m.get("historyd_store_checkpoint_seconds_count", `mode="passive"`); !ok || n < 1 {
		t.Errorf("passive checkpoints %v (present %v) after ~%d KB written", n, ok, writes)
	}
	for _, mode := range []string{"restart", "truncate"} {
		if _, ok := m.get("historyd_store_checkpoint_seconds_count", `mode="`+mode+`"`); !ok {
			t.Errorf("no checkpoint histogram for mode %s", mode)
		}
	}
	if n, _ := m.get("historyd_store_database_bytes"); n < writes*1000 {
		t.Errorf("database %v bytes after %d KB of messages", n, writes)
	}
	if n, ok := m.get("historyd_store_wal_bytes"); !ok || n < 0 {
		t.Errorf("WAL bytes %v (present %v)", n, ok)
	}
	hits, _ := m.get("historyd_store_cache_hits_total")
	misses, ok := m.get("historyd_store_cache_misses_total")
	if hits <= 0 || !ok {
		t.Errorf("cache hits %v, misses %v (present %v): want hits after reading what was just written", hits, misses, ok)
	}
}
