package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/historyd/historyd/internal/store/sqlite"
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
	for path, want := range map[string]int{
		"/debug/pprof/":          http.StatusOK,
		"/debug/pprof/goroutine": http.StatusOK,
		"/debug/pprof/symbol":    http.StatusOK,
		"/debug/pprof/cmdline":   http.StatusNotFound, // it can hold secrets: TestPprofHidesTheCommandLine
	} {
		resp, err := http.Get("http://" + ps.addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || len(body) == 0 {
			t.Errorf("GET %s: %d %q, want %d", path, resp.StatusCode, body, want)
		}
	}
	stop, err := servePprof("", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	stop() // off: nothing to stop
}

// TestPprofAddrCheckedBeforeOpening: a --pprof-addr whose port is out of range is a usage error
// found with the other settings, exit 2 and one line, before the store opens (it exited 1 once
// the store had been opened and migrated), as --listen and --metrics-addr are.
func TestPprofAddrCheckedBeforeOpening(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr strings.Builder
	code := runIO(context.Background(), signals{}, []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--pprof-addr", "127.0.0.1:99999"},
		envOf(nil), &stdout, &stderr)
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "--pprof-addr") || !strings.Contains(lines[0], "99999") {
		t.Errorf("--pprof-addr 127.0.0.1:99999 = %d, %q; want 2 and one line naming the flag and the port", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, sqlite.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the store was opened before --pprof-addr was checked: stat = %v", err)
	}
}

// TestPprofWarnsBeyondLoopback: pprof served beyond loopback (no authentication) logs a warning
// naming the address, as the gRPC listener does; on loopback it does not.
func TestPprofWarnsBeyondLoopback(t *testing.T) {
	for addr, warn := range map[string]bool{"127.0.0.1:0": false, "0.0.0.0:0": true} {
		core, logs := observer.New(zap.InfoLevel)
		stop, err := servePprof(addr, zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		stop()
		warnings := logs.FilterLevelExact(zap.WarnLevel).FilterMessageSnippet("beyond loopback").All()
		if got := len(warnings) == 1; got != warn {
			t.Errorf("--pprof-addr %s: warnings %v, want a warning: %v", addr, warnings, warn)
		}
		if warn && len(warnings) == 1 && warnings[0].ContextMap()["address"] == "" { // 0.0.0.0 or [::], as the kernel bound it
			t.Errorf("the warning names %v, want the address served", warnings[0].ContextMap()["address"])
		}
	}
}

// TestPprofHidesTheCommandLine: the real process's /debug/pprof/cmdline answered its whole command
// line, --postgres-url's password included, to anyone who reached the unauthenticated listener;
// nothing pprof serves carries it now.
func TestPprofHidesTheCommandLine(t *testing.T) {
	const password = "pprof-must-not-show-this"
	// A PostgreSQL that refuses: historyd serves, NOT_SERVING, and retries.
	p := startProcess(t, []string{"--listen", "127.0.0.1:0", "--pprof-addr", "127.0.0.1:0", "--store", "postgres",
		"--postgres-url", "postgres://historyd:" + password + "@127.0.0.1:1/historyd?sslmode=disable"}, "serving pprof", "serving")
	addr := p.awaitAddress(t, "serving pprof")
	p.awaitAddress(t, "serving")
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/symbol"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), password) {
			t.Errorf("GET %s (%d) shows the password: %q", path, resp.StatusCode, body)
		}
		if path == "/debug/pprof/cmdline" && resp.StatusCode == http.StatusOK {
			t.Errorf("GET %s = 200 %q, want it not served", path, body)
		}
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("historyd exited %d on SIGTERM, want 0: %s", code, p.stderr.String())
	}
	if strings.Contains(p.stderr.String(), password) {
		t.Errorf("the log shows the password: %s", p.stderr.String())
	}
}
