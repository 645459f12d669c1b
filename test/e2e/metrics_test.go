//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMetricsAfterExamples: after a run of every docs/examples/*.sh against the real binary,
// `curl -s localhost:PORT/metrics` shows the gRPC server metrics and historyd's own: branches,
// messages, watchers, owners, queued and dead-lettered messages, evicted subscribers (issue 7
// acceptance).
func TestMetricsAfterExamples(t *testing.T) {
	p := startServer(t, "--metrics-addr", "127.0.0.1:0")
	metricsAddr := logAddress(t, p, "serving metrics")
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob(filepath.Join(root, "docs", "examples", "*.sh"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples in docs/examples (%v)", err)
	}
	for _, ex := range examples {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", ex)
		cmd.Env = append(os.Environ(), "HISTORYD_ADDR="+p.addr, "GRPCURL="+grpcurlBin)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\nstderr:\n%s", filepath.Base(ex), err, stderr.String())
		}
	}

	// As the issue says: curl, when the machine has it; the same GET from Go otherwise.
	var m series
	if curl, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command(curl, "-s", "http://"+metricsAddr+"/metrics").Output()
		if err != nil {
			t.Fatalf("curl -s %s/metrics: %v", metricsAddr, err)
		}
		m = parseMetrics(t, string(out))
	} else {
		t.Log("no curl on PATH: fetching /metrics with net/http")
		m = scrape(t, metricsAddr)
	}

	// Present and non-zero after the examples: what they created and did.
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"historyd_branches", nil},
		{"historyd_messages", nil},
		{"historyd_exchange_owners", nil},
		{"historyd_exchange_dead_lettered_total", nil},
		{"historyd_store_memory_used_bytes", nil},
		{"grpc_server_handled_total", []string{`grpc_method="AddMessage"`, `grpc_code="OK"`}},
		{"grpc_server_handled_total", []string{`grpc_method="Collect"`, `grpc_code="OK"`}},
		{"grpc_server_handling_seconds_count", []string{`grpc_method="CreateBranch"`}},
	} {
		if v, ok := m.get(c.name, c.labels...); !ok || v <= 0 {
			t.Errorf("%s%v = %v (present %v), want > 0 after the examples", c.name, c.labels, v, ok)
		}
	}
	// Present, whatever their value (nothing is watching, queued or evicted when the examples end).
	for _, name := range []string{
		"historyd_branch_watchers", "historyd_exchange_queued_messages", "historyd_exchange_inbox_messages",
		"historyd_exchange_dead_letters", "historyd_exchange_subscribers", "historyd_store_memory_budget_bytes",
		"historyd_open_streams", "historyd_evicted_subscribers_total", "go_memstats_heap_alloc_bytes",
	} {
		if _, ok := m.get(name); !ok {
			t.Errorf("%s missing from /metrics", name)
		}
	}
	if v, _ := m.get("historyd_evicted_subscribers_total", `grpc_method="SubscribeInbox"`); v != 0 {
		t.Errorf("evicted SubscribeInbox subscribers = %v, want 0 after the examples", v)
	}
}
