package main

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// --pprof-addr serves Go's profiles on their own listener, and nothing when it is empty (issue 8:
// "the server may expose pprof behind a flag that is off by default").
func TestPprof(t *testing.T) {
	cfg, err := parseConfig(nil, envOf(nil))
	if err != nil || cfg.PprofAddr != "" {
		t.Fatalf("default pprof address %q (%v), want off", cfg.PprofAddr, err)
	}
	cfg, err = parseConfig(nil, envOf(map[string]string{"HISTORYD_PPROF_ADDR": "127.0.0.1:0"}))
	if err != nil || cfg.PprofAddr != "127.0.0.1:0" {
		t.Fatalf("HISTORYD_PPROF_ADDR: %q, %v", cfg.PprofAddr, err)
	}
	if _, err := parseConfig([]string{"--pprof-addr", "localhost"}, envOf(nil)); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "localhost") {
		t.Errorf("--pprof-addr localhost: %v, want a usage error naming it", err)
	}

	ps, err := startPprof("127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ps.close(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	resp, err := http.Get("http://" + ps.addr() + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Errorf("GET /debug/pprof/cmdline: %d %q", resp.StatusCode, body)
	}
	stop, err := servePprof("", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	stop() // off: nothing to stop
}
