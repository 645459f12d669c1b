package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests that need the real process, its own os.Args and signals (process_test.go), run
	// this binary again as historyd: main() exits the process.
	if os.Getenv(envRunMain) == "1" {
		main()
	}
	goleak.VerifyTestMain(m)
}

const testTimeout = 10 * time.Second

// logSink collects stderr lines and reports the address of the "serving" line.
type logSink struct {
	mu      sync.Mutex
	buf     strings.Builder
	serving chan string
	once    sync.Once
}

func newLogSink() *logSink { return &logSink{serving: make(chan string, 1)} }

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	for _, line := range strings.Split(string(p), "\n") {
		var obj struct{ Msg, Address string }
		if json.Unmarshal([]byte(line), &obj) == nil && obj.Msg == "serving" {
			s.once.Do(func() { s.serving <- obj.Address })
		}
	}
	return len(p), nil
}

func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimRight(s.buf.String(), "\n"), "\n")
}

// TestRunUsageErrors: an unknown flag or an invalid value exits 2 with one line that names the flag
// and a valid value (issue 19: "usage errors exit 2 with one line naming the flag and an example of
// a valid value").
func TestRunUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{args: []string{"--nope"}, want: []string{"--nope"}},
		{args: []string{"--log-format", "yaml"}, want: []string{"json or console"}},
		{args: []string{"extra"}, want: []string{"extra"}},
		{args: []string{"--grace-period", "10"}, want: []string{"--grace-period", "10s"}},
		{args: []string{"--listen", "127.0.0.1:99999"}, want: []string{"--listen", "99999", "127.0.0.1:50051"}},
		{args: []string{"--metrics-addr", "127.0.0.1:http"}, want: []string{"--metrics-addr", "127.0.0.1:9090"}},
		{args: []string{"--memory-budget", "lots"}, want: []string{"--memory-budget", "1GiB"}},
		{args: []string{"--watch-buffer", "x"}, want: []string{"--watch-buffer", "whole number"}},
		{args: []string{"--exchange-background-collect=maybe"}, want: []string{"--exchange-background-collect", "true or false"}},
		{args: []string{"--max-concurrent-streams", "-1"}, want: []string{"--max-concurrent-streams", "100"}},
		{env: map[string]string{"HISTORYD_GRACE_PERIOD": "10"}, want: []string{"HISTORYD_GRACE_PERIOD", "--grace-period", "10s"}},
	} {
		var stdout, stderr strings.Builder
		code := runIO(context.Background(), signals{}, tc.args, envOf(tc.env), &stdout, &stderr)
		if code != 2 {
			t.Errorf("run(%q, %v) = %d, want 2", tc.args, tc.env, code)
		}
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if len(lines) != 1 {
			t.Errorf("run(%q, %v) printed %d lines, want 1: %q", tc.args, tc.env, len(lines), stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("run(%q, %v) printed %q, want it to contain %q", tc.args, tc.env, lines[0], w)
			}
		}
		if stdout.Len() != 0 {
			t.Errorf("run(%q) wrote %q on stdout, want nothing", tc.args, stdout.String())
		}
	}
}

// TestRunHelp: help, --help and -h print the help on stdout and exit 0; it lists every subcommand
// and each flag once, with --, its variable and its default (issue 19).
func TestRunHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"serve", "--help"}} {
		var stdout, stderr strings.Builder
		if code := runIO(context.Background(), signals{}, args, envOf(nil), &stdout, &stderr); code != 0 {
			t.Errorf("run(%q) = %d, want 0", args, code)
		}
		if stderr.Len() != 0 {
			t.Errorf("run(%q) wrote %q on stderr, want the help on stdout only", args, stderr.String())
		}
		out := stdout.String()
		if !strings.HasPrefix(out, "usage:") {
			t.Errorf("run(%q) printed %q", args, out)
		}
		for _, c := range []string{"serve", "healthcheck", "version", "help"} {
			if !strings.Contains(out, "\n  "+c+" ") {
				t.Errorf("help lacks the subcommand %s", c)
			}
		}
		for _, s := range settings {
			if n := strings.Count(out, "  --"+s.flag+"\n"); n != 1 {
				t.Errorf("help lists --%s %d times, want once", s.flag, n)
			}
		}
		if strings.Contains(out, "\n  -"+settings[0].flag) {
			t.Error("help writes a flag with one dash")
		}
	}
}

// TestRunVersion: version and --version print the version, the commit and the Go version on stdout
// and exit 0 (issue 19).
func TestRunVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr strings.Builder
		if code := runIO(context.Background(), signals{}, args, envOf(nil), &stdout, &stderr); code != 0 {
			t.Errorf("run(%q) = %d, want 0; stderr %q", args, code, stderr.String())
		}
		b := currentBuild()
		for _, want := range []string{"historyd " + b.Version + "\n", "commit: " + b.Commit + "\n", "go: " + runtime.Version() + "\n"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("run(%q) printed %q, want %q", args, stdout.String(), want)
			}
		}
	}
	var stdout, stderr strings.Builder
	if code := runIO(context.Background(), signals{}, []string{"version", "extra"}, envOf(nil), &stdout, &stderr); code != 2 {
		t.Errorf("run(version extra) = %d, want 2", code)
	}
}

// TestRunAddressInUse: when the address is taken, run exits 1 after exactly one log line that
// names the address (issue 2 acceptance).
func TestRunAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()

	var out strings.Builder
	code := run(context.Background(), []string{"--listen", addr, "--store", "memory"}, envOf(nil), &out)
	if code != 1 {
		t.Errorf("run on a taken address = %d, want 1", code)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("run printed %d lines, want exactly 1: %q", len(lines), out.String())
	}
	var obj struct{ Level, Msg, Address string }
	if err := json.Unmarshal([]byte(lines[0]), &obj); err != nil {
		t.Fatalf("line %q is not JSON: %v", lines[0], err)
	}
	if obj.Level != "error" || !strings.Contains(obj.Msg, addr) || obj.Address != addr {
		t.Errorf("line = %+v, want an error naming %s", obj, addr)
	}
}

// TestRunServesUntilCancelled: run serves on the configured address and, once its context ends
// (what SIGINT/SIGTERM do), shuts down and exits 0.
func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := newLogSink()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--grace-period", "5s", "--store", "memory"}, envOf(nil), sink)
	}()

	var addr string
	select {
	case addr = <-sink.serving:
	case code := <-done:
		t.Fatalf("run exited %d before serving: %q", code, sink.lines())
	case <-time.After(testTimeout):
		t.Fatalf("no serving line within %v: %q", testTimeout, sink.lines())
	}
	conn, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatalf("dialing the served address %s: %v", addr, err)
	}
	conn.Close()

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run = %d after cancel, want 0; log %q", code, sink.lines())
		}
	case <-time.After(testTimeout):
		t.Fatal("run did not return after its context ended")
	}
	// Issue 14: the start line names the engine (and, for sqlite, the database file).
	if log := strings.Join(sink.lines(), "\n"); !strings.Contains(log, `"store":"memory"`) || strings.Contains(log, `"data_file"`) {
		t.Errorf("log %q, want the serving line to name store memory and no data file", log)
	}
	last := sink.lines()[len(sink.lines())-1]
	if !strings.Contains(last, `"msg":"stopped"`) {
		t.Errorf("last log line = %q, want the stopped line", last)
	}
}
